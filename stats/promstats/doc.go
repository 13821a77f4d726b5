// Package promstats exports a stats.Hub, the kernel's migration and reset
// counters and the reuseport groups of chosen listeners to Prometheus. It is
// the only zerodrop package that imports github.com/prometheus/client_golang.
//
// Register New(hub, opts) in your registry, or serve Handler(hub, opts).
//
// # Metrics
//
// Every name starts with zerodrop_; counters end in _total, durations are in
// seconds. Labels are few and bounded: listener (a name the program chooses,
// such as "http"), method (drain.Method), outcome.
//
//	zerodrop_generation                                  gauge: newest generation known to serve
//	zerodrop_drains_total{listener,method}               drains recorded
//	zerodrop_drains_lossy_total{listener,method}         drains with a remainder or forced connections
//	zerodrop_drain_queued_connections_total{listener,method}
//	                                                     connections queued when the listener stopped
//	zerodrop_drain_connections_total{listener,method,outcome}
//	                                                     what became of them: migrated, accepted, left (to
//	                                                     other holders), remainder (the kernel may have reset them)
//	zerodrop_drain_forced_connections_total{listener,method}
//	                                                     HTTP connections closed at the deadline
//	zerodrop_drain_duration_seconds{listener,method}     histogram of the stop (whole Shutdown for drain.Server)
//	zerodrop_handoffs_total{outcome}                     handoffs: success, failure, timeout, fallback
//	zerodrop_handoff_sockets_total{outcome}              sockets handed over
//	zerodrop_handoff_duration_seconds{outcome}           histogram
//	zerodrop_events_dropped_total                        events a slow stats subscriber lost
//	zerodrop_kernel_tcp_migrate_req                      gauge: net.ipv4.tcp_migrate_req (1 on, 0 off)
//	zerodrop_kernel_migrate_req_success_total            TcpExt.TCPMigrateReqSuccess
//	zerodrop_kernel_migrate_req_failure_total            TcpExt.TCPMigrateReqFailure
//	zerodrop_kernel_listen_overflows_total               TcpExt.ListenOverflows
//	zerodrop_kernel_listen_drops_total                   TcpExt.ListenDrops
//	zerodrop_kernel_out_rsts_total                       Tcp.OutRsts
//	zerodrop_kernel_estab_resets_total                   Tcp.EstabResets
//	zerodrop_group_up{listener}                          1 when the group could be read
//	zerodrop_group_members{listener}                     listeners in the reuseport group
//	zerodrop_group_queue_connections{listener}           accept queues, summed
//	zerodrop_group_backlog_connections{listener}         listen backlogs, summed
//
// The kernel counters are namespace-wide and exported as counters with the
// kernel's values (they start at 0 with the namespace). With migration off,
// a reset queue shows only in zerodrop_kernel_out_rsts_total and
// zerodrop_kernel_estab_resets_total: alert on their rate during rollouts.
//
// # Cost
//
// A scrape copies the Hub's totals, reads /proc/net/netstat, /proc/net/snmp
// and the sysctl, and sends one sock_diag dump per configured group. The
// kernel figures are those of the network namespace of the thread that
// scrapes.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package promstats
