package steer_test

import (
	"net"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	addr     string
	dir      string // pins of the steered group
	ls       []*reuseport.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
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
	b.Cleanup(func() {
		for _, l := range g.ls {
			l.Close()
		}
		g.wg.Wait()
	})
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
	const size = 100
	var tp, ts time.Duration
	var ratios []float64
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+size, i+1 {
		n := min(size, b.N-done)
		var p, s time.Duration
		if i%2 == 0 { // alternate which group goes first
			p = plain.batch(n)
			s = steered.batch(n)
		} else {
			s = steered.batch(n)
			p = plain.batch(n)
		}
		tp, ts = tp+p, ts+s
		ratios = append(ratios, p.Seconds()/s.Seconds())
	}
	b.StopTimer()
	if plain.accepted.Load() != int64(b.N) || steered.accepted.Load() != int64(b.N) {
		b.Fatalf("accepted %d plain and %d steered, want %d each", plain.accepted.Load(), steered.accepted.Load(), b.N)
	}
	b.ReportMetric(float64(b.N)/tp.Seconds(), "plain-conns/s")
	b.ReportMetric(float64(b.N)/ts.Seconds(), "steer-conns/s")
	b.ReportMetric(tp.Seconds()/ts.Seconds(), "steer/plain")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-batch-steer/plain")
	if after, err := prog.Stats(); err == nil && after.RunCount > before.RunCount {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(after.RunCount-before.RunCount), "prog-ns/run")
	}
}
