package handoff

import (
	"context"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkHandoff measures one handoff of n TCP listeners, in one process:
// from the successor's connect (New) through Listen of every socket and Ready
// to the predecessor's Exit. It binds only 127.0.0.1:0 and a unix socket under
// b.TempDir; no traffic. ms-median is the median over the b.N handoffs.
func BenchmarkHandoff(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run("listeners="+strconv.Itoa(n), func(b *testing.B) { benchHandoff(b, n) })
	}
}

func benchHandoff(b *testing.B, n int) {
	ctx := context.Background()
	cfg := Config{Path: b.TempDir() + "/h.sock"}
	old, lns := benchGen(b, cfg, n)
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		u, err := New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		next := make([]net.Listener, n)
		for i := range next {
			if next[i], err = u.Listen(ctx, "l"+strconv.Itoa(i), "tcp4", "127.0.0.1:0"); err != nil {
				b.Fatal(err)
			}
		}
		if err := u.Ready(); err != nil {
			b.Fatal(err)
		}
		<-old.Exit()
		took = append(took, time.Since(t0))
		b.StopTimer()
		closeAll(lns)
		old.Close()
		old, lns = u, next
		b.StartTimer()
	}
	b.StopTimer()
	closeAll(lns)
	old.Close()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
}

func benchGen(b *testing.B, cfg Config, n int) (*Upgrader, []net.Listener) {
	ctx := context.Background()
	u, err := New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	lns := make([]net.Listener, n)
	for i := range lns {
		if lns[i], err = u.Listen(ctx, "l"+strconv.Itoa(i), "tcp4", "127.0.0.1:0"); err != nil {
			b.Fatal(err)
		}
	}
	if err := u.Ready(); err != nil {
		b.Fatal(err)
	}
	return u, lns
}

func closeAll(lns []net.Listener) {
	for _, l := range lns {
		l.Close()
	}
}
