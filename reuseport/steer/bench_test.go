package steer_test

import (
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
	"golang.org/x/sys/unix"
)

const envBenchNetNS = "ZERODROP_STEER_BENCH_NETNS"

// BenchmarkAccept measures the accept throughput of a two-member group
// without and with the steering program, side by side in one run (batches
// alternate between the two groups). It re-runs
// itself in a fresh network namespace (root only); the numbers are the
// sub-benchmark lines of that child, printed above the parent's SKIP line.
func BenchmarkAccept(b *testing.B) {
	if !netnstest.BenchInNamespace(b, envBenchNetNS) {
		return
	}
	b.Run("interleaved", benchInterleaved)
}

// acceptGroup is a two-member group whose members accept and close.
type acceptGroup struct {
	addr string
	dir  string // pins of the steered group
	ls   []*reuseport.Listener
	netnstest.Acceptor
}

func newAcceptGroup(b *testing.B, cfg *steer.Config) *acceptGroup {
	g := &acceptGroup{addr: "127.0.0.1:0"}
	for range 2 {
		l := listen(b, g.addr, reuseport.Options{})
		g.addr = l.Addr().String()
		if cfg != nil {
			g.dir = join(b, cfg, l).Group().Dir()
		}
		g.ls = append(g.ls, l)
		g.Serve(l)
	}
	b.Cleanup(func() {
		for _, l := range g.ls {
			l.Close()
		}
		g.Wait()
	})
	return g
}

// benchInterleaved alternates batches of 100 connections between a plain
// group and a steered one (each going first every other time), so that both
// see the same machine load, and
// reports each one's throughput, their ratio (overall, and the median of the
// per-batch ratios, which resists bursts of load from other processes), and
// the program's own mean run time (kernel BPF stats). b.N connections per
// group.
func benchInterleaved(b *testing.B) {
	plain := newAcceptGroup(b, nil)
	steered := newAcceptGroup(b, &steer.Config{Dir: netnstest.MountBPF(b, "0755")})
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(steered.dir, "prog"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	before, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	netnstest.Interleave(b, "plain", plain.addr, &plain.Acceptor, "steer", steered.addr, &steered.Acceptor)
	if after, err := prog.Stats(); err == nil && after.RunCount > before.RunCount {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(after.RunCount-before.RunCount), "prog-ns/run")
	}
}
