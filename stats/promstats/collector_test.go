package promstats_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// handoffExposition is the generation and handoff histogram after n
// successful handoffs of 250 ms each, from generation 1.
func handoffExposition(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
# HELP zerodrop_generation Newest generation known to serve: this process, or its successor after a handoff (1 for the first, +1 per handoff).
# TYPE zerodrop_generation gauge
zerodrop_generation %d
`, 1+n)
	if n == 0 {
		return b.String()
	}
	b.WriteString(`# HELP zerodrop_handoff_duration_seconds Duration of handoffs.
# TYPE zerodrop_handoff_duration_seconds histogram
`)
	for _, le := range stats.DurationBuckets() {
		in := 0
		if le >= 0.25 {
			in = n
		}
		fmt.Fprintf(&b, "zerodrop_handoff_duration_seconds_bucket{outcome=\"success\",le=\"%g\"} %d\n", le, in)
	}
	fmt.Fprintf(&b, `zerodrop_handoff_duration_seconds_bucket{outcome="success",le="+Inf"} %[1]d
zerodrop_handoff_duration_seconds_sum{outcome="success"} %[2]g
zerodrop_handoff_duration_seconds_count{outcome="success"} %[1]d
# HELP zerodrop_handoffs_total Handoffs by outcome.
# TYPE zerodrop_handoffs_total counter
zerodrop_handoffs_total{outcome="success"} %[1]d
# HELP zerodrop_handoff_sockets_total Sockets handed over.
# TYPE zerodrop_handoff_sockets_total counter
zerodrop_handoff_sockets_total{outcome="success"} %[3]d
`, n, 0.25*float64(n), 2*n)
	return b.String()
}

// A chain of N handoffs moves the generation gauge and the handoff
// histogram's count by exactly N.
func TestHandoffChain(t *testing.T) {
	const n = 7
	hub := new(stats.Hub)
	c := promstats.New(hub, promstats.Options{})
	names := []string{"zerodrop_generation", "zerodrop_handoff_duration_seconds", "zerodrop_handoffs_total", "zerodrop_handoff_sockets_total"}
	hub.SetGeneration(1)
	compare(t, c, handoffExposition(0), names...)
	for g := uint64(1); g <= n; g++ {
		hub.RecordHandoff(stats.Handoff{From: g, To: g + 1, Took: 250 * time.Millisecond, Sockets: 2})
		compare(t, c, handoffExposition(int(g)), names...) // the cached row follows each record
	}
}

// The group gauges match a group the test makes: three members with backlogs
// 8, 16 and 32 and 5 queued connections; a port nobody listens on is an
// empty group; an address that names no group is down.
func TestGroupGauges(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		addr := "127.0.0.1:0"
		for _, backlog := range []int{8, 16, 32} {
			cfg := reuseport.Config{Options: reuseport.Options{Backlog: backlog}, Migration: reuseport.MigrationIgnore}
			l, err := cfg.Listen(context.Background(), "tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			addr = l.Addr().String()
		}
		netnstest.Queue(t, addr, 5, netnstest.ClientOptions{})
		waitGroupQueue(t, addr, 5)
		c := promstats.New(nil, promstats.Options{Groups: []promstats.Group{
			{Listener: "http", Addr: addr}, {Listener: "idle", Addr: "127.0.0.1:1"}, {Listener: "bad", Addr: "127.0.0.1:0"},
		}})
		compare(t, c, `
# HELP zerodrop_group_up 1 when the reuseport group could be read.
# TYPE zerodrop_group_up gauge
zerodrop_group_up{listener="bad"} 0
zerodrop_group_up{listener="http"} 1
zerodrop_group_up{listener="idle"} 1
# HELP zerodrop_group_members Listeners in the reuseport group.
# TYPE zerodrop_group_members gauge
zerodrop_group_members{listener="http"} 3
zerodrop_group_members{listener="idle"} 0
# HELP zerodrop_group_queue_connections Connections waiting in the group's accept queues, summed.
# TYPE zerodrop_group_queue_connections gauge
zerodrop_group_queue_connections{listener="http"} 5
zerodrop_group_queue_connections{listener="idle"} 0
# HELP zerodrop_group_backlog_connections Listen backlogs of the group's members, summed.
# TYPE zerodrop_group_backlog_connections gauge
zerodrop_group_backlog_connections{listener="http"} 56
zerodrop_group_backlog_connections{listener="idle"} 0
`, "zerodrop_group_up", "zerodrop_group_members", "zerodrop_group_queue_connections", "zerodrop_group_backlog_connections")
	})
}

// With migration off, a lone listener closed with 20 queued resets them all:
// TcpExt stays silent and only Tcp.OutRsts counts them (KERNEL.md); the
// collector shows the kernel's values.
func TestKernelResets(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
		l, err := cfg.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cs := netnstest.Queue(t, l.Addr().String(), 20, netnstest.ClientOptions{})
		waitGroupQueue(t, l.Addr().String(), 20)
		l.Close()
		if tally := cs.Await(10 * time.Second); tally[netnstest.Reset] != 20 {
			t.Fatalf("tally %v, want 20 reset", tally)
		}
		c := promstats.New(nil, promstats.Options{})
		compare(t, c, `
# HELP zerodrop_kernel_tcp_migrate_req net.ipv4.tcp_migrate_req: 1 when a closing listener's queue moves to a sibling.
# TYPE zerodrop_kernel_tcp_migrate_req gauge
zerodrop_kernel_tcp_migrate_req 0
# HELP zerodrop_kernel_migrate_req_success_total TcpExt.TCPMigrateReqSuccess of the network namespace.
# TYPE zerodrop_kernel_migrate_req_success_total counter
zerodrop_kernel_migrate_req_success_total 0
# HELP zerodrop_kernel_migrate_req_failure_total TcpExt.TCPMigrateReqFailure of the network namespace.
# TYPE zerodrop_kernel_migrate_req_failure_total counter
zerodrop_kernel_migrate_req_failure_total 0
# HELP zerodrop_kernel_out_rsts_total Tcp.OutRsts of the network namespace: with migration off, the trace of a reset queue.
# TYPE zerodrop_kernel_out_rsts_total counter
zerodrop_kernel_out_rsts_total 20
`, "zerodrop_kernel_tcp_migrate_req", "zerodrop_kernel_migrate_req_success_total", "zerodrop_kernel_migrate_req_failure_total", "zerodrop_kernel_out_rsts_total")
		k, err := reuseport.ReadCounters()
		if err != nil {
			t.Fatal(err)
		}
		compare(t, c, fmt.Sprintf(`
# HELP zerodrop_kernel_estab_resets_total Tcp.EstabResets of the network namespace.
# TYPE zerodrop_kernel_estab_resets_total counter
zerodrop_kernel_estab_resets_total %d
`, k.EstabResets), "zerodrop_kernel_estab_resets_total")
	})
}

// Scrapes run while drains and handoffs are recorded (run with -race); every
// scrape is consistent and the totals come out exact.
func TestConcurrentScrape(t *testing.T) {
	hub := new(stats.Hub)
	c := promstats.New(hub, promstats.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	const workers, rounds = 4, 100
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range rounds {
				hub.RecordDrain(fmt.Sprint("l", w), &drain.Report{Method: drain.MethodAccept, QueuedAtStop: 1, Accepted: 1, Took: time.Millisecond})
				hub.RecordHandoff(stats.Handoff{From: uint64(i + 1), To: uint64(i + 2), Took: time.Second})
			}
		}()
		go func() {
			defer wg.Done()
			for range rounds / 10 {
				if _, err := reg.Gather(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	var drains string
	for w := range workers {
		drains += fmt.Sprintf("zerodrop_drains_total{listener=\"l%d\",method=\"accept\"} %d\n", w, rounds)
	}
	compare(t, c, fmt.Sprintf(`# HELP zerodrop_drains_total Listener drains.
# TYPE zerodrop_drains_total counter
%s# HELP zerodrop_handoffs_total Handoffs by outcome.
# TYPE zerodrop_handoffs_total counter
zerodrop_handoffs_total{outcome="success"} %d
`, drains, workers*rounds), "zerodrop_drains_total", "zerodrop_handoffs_total")
}

// The names, units and types follow the client library's conventions.
func TestLint(t *testing.T) {
	hub := new(stats.Hub)
	hub.RecordDrain("http", &drain.Report{Method: drain.MethodMigrate, QueuedAtStop: 3, Migrated: 3})
	hub.RecordHandoff(stats.Handoff{From: 1, To: 2})
	problems, err := testutil.CollectAndLint(promstats.New(hub, promstats.Options{}))
	if err != nil || len(problems) != 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// Handler serves the text exposition.
func TestHandler(t *testing.T) {
	hub := new(stats.Hub)
	hub.SetGeneration(3)
	w := httptest.NewRecorder()
	promstats.Handler(hub, promstats.Options{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != 200 || !strings.Contains(w.Body.String(), "\nzerodrop_generation 3\n") {
		t.Fatalf("%d\n%s", w.Code, w.Body)
	}
}
