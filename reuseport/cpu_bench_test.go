package reuseport_test

import (
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// BenchmarkAcceptCPU measures the accept throughput of a group whose members
// cover every online CPU with SO_INCOMING_CPU (the kernel's pick then scans
// the group from the hash position for a member of the SYN's CPU) beside a
// plain group of the same size, for 4, 16 and 64 members, batches of 100
// connections alternating between the two. It reports each group's
// connections per second, their ratio cpu/plain (overall, and the median of
// the per-batch ratios, which resists bursts of load from other processes).
// b.N connections per group. It runs in a fresh network namespace (root).
func BenchmarkAcceptCPU(b *testing.B) {
	if !netnstest.BenchInNamespace(b, "ZERODROP_REUSEPORT_BENCH_NETNS") {
		return
	}
	cpus, err := reuseport.OnlineCPUs()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{4, 16, 64} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) { benchCPUInterleaved(b, n, cpus) })
	}
}

// acceptGroup is a group of listeners that accept and close.
type acceptGroup struct {
	addr     string
	ls       []*reuseport.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// newAcceptGroup opens n members; with cpus, member i prefers cpus[i%len(cpus)].
func newAcceptGroup(b *testing.B, n int, cpus []int) *acceptGroup {
	g := &acceptGroup{addr: "127.0.0.1:0"}
	b.Cleanup(func() {
		for _, l := range g.ls {
			l.Close()
		}
		g.wg.Wait()
	})
	for i := range n {
		var cfg reuseport.Config
		if cpus != nil {
			cfg.Options.IncomingCPU = &cpus[i%len(cpus)]
		}
		l, err := cfg.Listen(ctx, "tcp4", g.addr)
		if err != nil {
			b.Fatal(err)
		}
		g.addr = l.Addr().String()
		g.ls = append(g.ls, l)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				g.accepted.Add(1)
				c.Close()
			}
		}()
	}
	return g
}

// batch connects n clients from 4 goroutines and waits (at most 10 s) until
// the group accepted them all; it returns the time taken.
func (g *acceptGroup) batch(n int) time.Duration {
	start := time.Now()
	want := g.accepted.Load() + int64(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if c, err := net.Dial("tcp4", g.addr); err == nil {
					c.Close()
				}
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); g.accepted.Load() < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
	return time.Since(start)
}

func benchCPUInterleaved(b *testing.B, members int, cpus []int) {
	plain := newAcceptGroup(b, members, nil)
	covered := newAcceptGroup(b, members, cpus)
	const size = 100
	var tp, tc time.Duration
	var ratios []float64
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+size, i+1 {
		n := min(size, b.N-done)
		var p, c time.Duration
		if i%2 == 0 { // alternate which group goes first
			p, c = plain.batch(n), covered.batch(n)
		} else {
			c, p = covered.batch(n), plain.batch(n)
		}
		tp, tc = tp+p, tc+c
		ratios = append(ratios, p.Seconds()/c.Seconds())
	}
	b.StopTimer()
	if plain.accepted.Load() != int64(b.N) || covered.accepted.Load() != int64(b.N) {
		b.Fatalf("accepted %d plain and %d cpu, want %d each", plain.accepted.Load(), covered.accepted.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/tp.Seconds(), "plain-conns/s")
	b.ReportMetric(float64(b.N)/tc.Seconds(), "cpu-conns/s")
	b.ReportMetric(tp.Seconds()/tc.Seconds(), "cpu/plain")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-batch-cpu/plain")
}
