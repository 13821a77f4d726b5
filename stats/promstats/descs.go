package promstats

import "github.com/prometheus/client_golang/prometheus"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("zerodrop_"+name, help, labels, nil)
}

var (
	descGeneration = desc("generation", "Newest generation known to serve: this process, or its successor after a handoff (1 for the first, +1 per handoff).")
	descDropped    = desc("events_dropped_total", "Events a slow stats subscriber lost.")

	descDrains        = desc("drains_total", "Listener drains.", "listener", "method")
	descDrainsLossy   = desc("drains_lossy_total", "Drains that left a remainder or forced connections closed.", "listener", "method")
	descQueued        = desc("drain_queued_connections_total", "Connections in the accept queue when a listener stopped.", "listener", "method")
	descConns         = desc("drain_connections_total", "What became of the queued connections: migrated (counter delta), accepted, left to other holders, remainder (possibly reset).", "listener", "method", "outcome")
	descForced        = desc("drain_forced_connections_total", "HTTP connections closed at the drain deadline.", "listener", "method")
	descKeepAlive     = desc("drain_keepalive_connections_total", "What became of the keep-alive connections at drains: handed_over (to a successor), returned (offered, not taken), received (from a predecessor), idle_closed (closed idle after IdleGrace), idle_closed_tls (of those, TLS), handed_over_tls (of handed_over, TLS sessions passed with their state), tls_not_handed_over (TLS ones that could not be: TLS 1.2, client certificates, a state not proven).", "listener", "method", "outcome")
	descDrainDuration = desc("drain_duration_seconds", "Duration of drains.", "listener", "method")

	descHandoffs        = desc("handoffs_total", "Handoffs by outcome.", "outcome")
	descHandoffSockets  = desc("handoff_sockets_total", "Sockets handed over.", "outcome")
	descHandoffDuration = desc("handoff_duration_seconds", "Duration of handoffs.", "outcome")

	descMigrateReq   = desc("kernel_tcp_migrate_req", "net.ipv4.tcp_migrate_req: 1 when a closing listener's queue moves to a sibling.")
	descKMigrateOK   = desc("kernel_migrate_req_success_total", "TcpExt.TCPMigrateReqSuccess of the network namespace.")
	descKMigrateFail = desc("kernel_migrate_req_failure_total", "TcpExt.TCPMigrateReqFailure of the network namespace.")
	descKOverflows   = desc("kernel_listen_overflows_total", "TcpExt.ListenOverflows of the network namespace.")
	descKDrops       = desc("kernel_listen_drops_total", "TcpExt.ListenDrops of the network namespace.")
	descKOutRsts     = desc("kernel_out_rsts_total", "Tcp.OutRsts of the network namespace: with migration off, the trace of a reset queue.")
	descKEstabResets = desc("kernel_estab_resets_total", "Tcp.EstabResets of the network namespace.")

	descGroupUp      = desc("group_up", "1 when the reuseport group could be read.", "listener")
	descGroupMembers = desc("group_members", "Listeners in the reuseport group.", "listener")
	descGroupQueue   = desc("group_queue_connections", "Connections waiting in the group's accept queues, summed.", "listener")
	descGroupBacklog = desc("group_backlog_connections", "Listen backlogs of the group's members, summed.", "listener")
)

var allDescs = []*prometheus.Desc{
	descGeneration, descDropped,
	descDrains, descDrainsLossy, descQueued, descConns, descForced, descKeepAlive, descDrainDuration,
	descHandoffs, descHandoffSockets, descHandoffDuration,
	descMigrateReq, descKMigrateOK, descKMigrateFail, descKOverflows, descKDrops, descKOutRsts, descKEstabResets,
	descGroupUp, descGroupMembers, descGroupQueue, descGroupBacklog,
}
