package reuseport_test

import (
	"fmt"
	"testing"

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

// newAcceptGroup opens n members that accept and close, and returns their
// address and acceptor; with cpus, member i prefers cpus[i%len(cpus)].
func newAcceptGroup(b *testing.B, n int, cpus []int) (string, *netnstest.Acceptor) {
	addr, a := "127.0.0.1:0", &netnstest.Acceptor{}
	var ls []*reuseport.Listener
	b.Cleanup(func() {
		for _, l := range ls {
			l.Close()
		}
		a.Wait()
	})
	for i := range n {
		var cfg reuseport.Config
		if cpus != nil {
			cfg.Options.IncomingCPU = &cpus[i%len(cpus)]
		}
		l, err := cfg.Listen(ctx, "tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		addr = l.Addr().String()
		ls = append(ls, l)
		a.Serve(l)
	}
	return addr, a
}

func benchCPUInterleaved(b *testing.B, members int, cpus []int) {
	plain, pa := newAcceptGroup(b, members, nil)
	covered, ca := newAcceptGroup(b, members, cpus)
	netnstest.Interleave(b, "plain", plain, pa, "cpu", covered, ca)
}
