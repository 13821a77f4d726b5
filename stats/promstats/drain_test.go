package promstats_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// drainExposition is what a collector shows after one drain of 20 queued
// connections of "http" by method, whatever became of them, with the
// kernel's counters of a fresh namespace and the sibling left in the group.
const drainExposition = `
# HELP zerodrop_drains_total Listener drains.
# TYPE zerodrop_drains_total counter
zerodrop_drains_total{listener="http",method="%[1]s"} 1
# HELP zerodrop_drains_lossy_total Drains that left a remainder or forced connections closed.
# TYPE zerodrop_drains_lossy_total counter
zerodrop_drains_lossy_total{listener="http",method="%[1]s"} 0
# HELP zerodrop_drain_queued_connections_total Connections in the accept queue when a listener stopped.
# TYPE zerodrop_drain_queued_connections_total counter
zerodrop_drain_queued_connections_total{listener="http",method="%[1]s"} 20
# HELP zerodrop_drain_connections_total What became of the queued connections: migrated (counter delta), accepted, left to other holders, remainder (possibly reset).
# TYPE zerodrop_drain_connections_total counter
zerodrop_drain_connections_total{listener="http",method="%[1]s",outcome="accepted"} %[3]d
zerodrop_drain_connections_total{listener="http",method="%[1]s",outcome="left"} 0
zerodrop_drain_connections_total{listener="http",method="%[1]s",outcome="migrated"} %[2]d
zerodrop_drain_connections_total{listener="http",method="%[1]s",outcome="remainder"} 0
# HELP zerodrop_kernel_tcp_migrate_req net.ipv4.tcp_migrate_req: 1 when a closing listener's queue moves to a sibling.
# TYPE zerodrop_kernel_tcp_migrate_req gauge
zerodrop_kernel_tcp_migrate_req %[4]d
# HELP zerodrop_kernel_migrate_req_success_total TcpExt.TCPMigrateReqSuccess of the network namespace.
# TYPE zerodrop_kernel_migrate_req_success_total counter
zerodrop_kernel_migrate_req_success_total %[2]d
# HELP zerodrop_kernel_migrate_req_failure_total TcpExt.TCPMigrateReqFailure of the network namespace.
# TYPE zerodrop_kernel_migrate_req_failure_total counter
zerodrop_kernel_migrate_req_failure_total 0
# HELP zerodrop_kernel_listen_overflows_total TcpExt.ListenOverflows of the network namespace.
# TYPE zerodrop_kernel_listen_overflows_total counter
zerodrop_kernel_listen_overflows_total 0
# HELP zerodrop_kernel_out_rsts_total Tcp.OutRsts of the network namespace: with migration off, the trace of a reset queue.
# TYPE zerodrop_kernel_out_rsts_total counter
zerodrop_kernel_out_rsts_total 0
# HELP zerodrop_group_members Listeners in the reuseport group.
# TYPE zerodrop_group_members gauge
zerodrop_group_members{listener="http"} 1
# HELP zerodrop_group_queue_connections Connections waiting in the group's accept queues, summed.
# TYPE zerodrop_group_queue_connections gauge
zerodrop_group_queue_connections{listener="http"} 0
`

var drainMetrics = []string{
	"zerodrop_drains_total", "zerodrop_drains_lossy_total", "zerodrop_drain_queued_connections_total",
	"zerodrop_drain_connections_total", "zerodrop_kernel_tcp_migrate_req", "zerodrop_kernel_migrate_req_success_total",
	"zerodrop_kernel_migrate_req_failure_total", "zerodrop_kernel_listen_overflows_total", "zerodrop_kernel_out_rsts_total",
	"zerodrop_group_members", "zerodrop_group_queue_connections",
}

// A drain of a listener with 20 queued and a sibling: with migration on the
// kernel moves all 20 to the sibling (TCPMigrateReqSuccess 20, no reset);
// with it off the drain accepts and serves all 20 itself (success 0, no
// reset). The collector shows exactly that.
func TestDrainCounters(t *testing.T) {
	cases := []struct {
		migrate            int
		method             drain.Method
		migrated, accepted int
		by                 string
	}{
		{1, drain.MethodMigrate, 20, 0, "B"},
		{0, drain.MethodAccept, 0, 20, "A"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("migrate=%d", tc.migrate), func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: tc.migrate}, func(t *testing.T) {
				hub := new(stats.Hub)
				c, addr := drainQueue(t, hub, tc.by)
				want := fmt.Sprintf(drainExposition, tc.method, tc.migrated, tc.accepted, tc.migrate)
				compare(t, c, want, drainMetrics...)
				if n, series := sampleCount(t, c, "zerodrop_drain_duration_seconds"); n != 1 || series != 1 {
					t.Fatalf("drain duration histogram: %d samples in %d series, want 1, 1", n, series)
				}
				t.Logf("group %s drained by %s", addr, tc.method)
			})
		})
	}
}

// drainQueue queues 20 clients at a listener A that does not accept, adds a
// sibling B that answers, stops A through drain (A answers what the drain
// accepted), with the report recorded in hub through drain.Options.OnReport,
// and returns a collector of hub that also watches the group.
func drainQueue(t *testing.T, hub *stats.Hub, by string) (*promstats.Collector, string) {
	ctx := context.Background()
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	a, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr().String()
	dl, err := drain.Wrap(a, drain.Options{OnReport: hub.DrainHook("http")})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	cs := netnstest.Queue(t, addr, 20, netnstest.ClientOptions{})
	waitGroupQueue(t, addr, 20)
	b, err := cfg.Listen(ctx, "tcp4", addr)
	if err != nil {
		dl.Close()
		t.Fatal(err)
	}
	waitB := answer(t, b, "B")
	t.Cleanup(func() { b.Close(); waitB() })
	if err := dl.Close(); err != nil {
		t.Fatalf("drain: %v", err)
	}
	answer(t, dl, "A")()
	tally := cs.Await(10 * time.Second)
	if got := answeredBy(cs); got[by] != 20 {
		t.Fatalf("answered by %v (tally %v), want all 20 by %s", got, tally, by)
	}
	return promstats.New(hub, promstats.Options{Groups: []promstats.Group{{Listener: "http", Addr: addr}}}), addr
}

// The keep-alive counters of drain.Server's reports, TLS sessions handed over
// with their state and those that could not be among them, summed over two
// drains of one listener.
func TestKeepAliveTLS(t *testing.T) {
	hub := new(stats.Hub)
	c := promstats.New(hub, promstats.Options{})
	for _, h := range []*drain.HTTPReport{
		{HandedOver: 6, HandedOverTLS: 4, TLSNotHandedOver: 1, IdleClosed: 1, IdleClosedTLS: 1, Received: 2},
		{HandedOver: 3, HandedOverTLS: 3, TLSNotHandedOver: 2, HandOverReturned: 1, IdleClosed: 2, IdleClosedTLS: 2},
	} {
		hub.RecordDrain("https", &drain.Report{Method: drain.MethodAccept, Took: time.Millisecond, HTTP: h})
	}
	compare(t, c, `
# HELP zerodrop_drain_keepalive_connections_total What became of the keep-alive connections at drains: handed_over (to a successor), returned (offered, not taken), received (from a predecessor), idle_closed (closed idle after IdleGrace), idle_closed_tls (of those, TLS), handed_over_tls (of handed_over, TLS sessions passed with their state), tls_not_handed_over (TLS ones that could not be: TLS 1.2, client certificates, a state not proven).
# TYPE zerodrop_drain_keepalive_connections_total counter
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="handed_over"} 9
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="handed_over_tls"} 7
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="idle_closed"} 3
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="idle_closed_tls"} 3
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="received"} 2
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="returned"} 1
zerodrop_drain_keepalive_connections_total{listener="https",method="accept",outcome="tls_not_handed_over"} 3
`, "zerodrop_drain_keepalive_connections_total")
}
