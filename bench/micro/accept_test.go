package micro

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
)

// perRound is the least number of Accepts per kind and round (a round is
// whole Williams designs: exactly 70 for 5 or 7 kinds, 72 for 6), about 1 ms
// of Accepts per kind.
const perRound = 70

// kind is a listener kind under test.
type kind struct {
	name string
	open func(testing.TB) (net.Listener, error)
}

// kinds are the listener kinds, the first one the reference: plain-TCP
// net.Listen.
func kinds() []kind {
	ctx := context.Background()
	return []kind{
		{"net.Listen-tcp", func(testing.TB) (net.Listener, error) { return listenTCP(ctx) }},
		{"net.Listen-mptcp", func(testing.TB) (net.Listener, error) {
			var lc net.ListenConfig
			lc.SetMultipathTCP(true)
			return lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		}},
		{"reuseport", func(testing.TB) (net.Listener, error) { return reuseport.Listen(ctx, "tcp4", "127.0.0.1:0") }},
		{"drain", func(testing.TB) (net.Listener, error) {
			l, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			return drain.Wrap(l, drain.Options{})
		}},
		{"handoff-fresh", func(b testing.TB) (net.Listener, error) {
			u, err := handoff.New(ctx, handoff.Config{Path: filepath.Join(b.TempDir(), "h.sock")})
			if err != nil {
				return nil, err
			}
			b.Cleanup(func() { u.Close() })
			return u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
		}},
		{"handoff-inherited", inherited},
	}
}

func listenTCP(ctx context.Context) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	return lc.Listen(ctx, "tcp4", "127.0.0.1:0")
}

// inherited returns a listener that a second Upgrader inherited from a
// first, in this process, after the first one's Exit.
func inherited(b testing.TB) (net.Listener, error) {
	ctx := context.Background()
	cfg := handoff.Config{Path: filepath.Join(b.TempDir(), "h.sock")}
	old, err := handoff.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer old.Close()
	ol, err := old.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer ol.Close()
	if err := old.Ready(); err != nil {
		return nil, err
	}
	u, err := handoff.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b.Cleanup(func() { u.Close() })
	l, err := u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if err := u.Ready(); err != nil {
		l.Close()
		return nil, err
	}
	<-old.Exit()
	if l.Addr().String() != ol.Addr().String() {
		l.Close()
		return nil, fmt.Errorf("inherited %s, predecessor had %s", l.Addr(), ol.Addr())
	}
	return l, nil
}

// open opens every kind; Cleanup closes them.
func open(b testing.TB, ks []kind) []net.Listener {
	lns := make([]net.Listener, len(ks))
	for i, k := range ks {
		l, err := k.open(b)
		if err != nil {
			b.Fatalf("%s: %v", k.name, err)
		}
		b.Cleanup(func() { l.Close() })
		lns[i] = l
	}
	return lns
}

// BenchmarkAcceptKinds measures every listener kind in b.N rounds of at
// least perRound Accepts each (see design_test.go) and reports each kind's
// trimmed mean time per Accept and its throughput relative to plain-TCP
// net.Listen (median of the per-round ratios; want at least 0.98); the log
// has the confidence intervals, the spread and the load average. It runs
// twice, with the kinds opened in the listed and in the reversed order: the
// design gives no kind a fixed place, so both should agree.
func BenchmarkAcceptKinds(b *testing.B) {
	b.Run("order=listed", func(b *testing.B) { run(b, kinds(), 0) })
	b.Run("order=reversed", func(b *testing.B) {
		ks := kinds()
		slices.Reverse(ks)
		run(b, ks, len(ks)-1)
	})
}

// BenchmarkAcceptNull is the design's null test: five identical plain-TCP
// net.Listen listeners, measured like BenchmarkAcceptKinds. Each should read
// 1.00 +- 0.01 of the first.
func BenchmarkAcceptNull(b *testing.B) {
	run(b, identical(5), 0)
}

// identical returns n plain-TCP net.Listen kinds named A0, A1, ...
func identical(n int) []kind {
	ks := make([]kind, n)
	for i := range ks {
		ks[i] = kind{fmt.Sprintf("A%d", i), func(testing.TB) (net.Listener, error) { return listenTCP(context.Background()) }}
	}
	return ks
}

// run measures the kinds and reports them relative to ks[ref].
func run(b *testing.B, ks []kind, ref int) {
	lns := open(b, ks)
	load := loadavg()
	b.ResetTimer()
	b.StopTimer()
	took := measure(b, lns, design{rounds: b.N, per: perRound, seed: 1})
	figs := summarize(took, ref, 1)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d rounds x %d Accepts per kind; load average %s before, %s after; ns/accept, ratio [95%% CI] [IQR] ratio-of-totals\n", b.N, len(took[0][0]), load, loadavg())
	for i, f := range figs {
		fmt.Fprintf(&sb, "%-18s %6.0f %.4f [%.4f, %.4f] [%.4f, %.4f] %.4f\n", ks[i].name, f.ns, f.ratio, f.lo, f.hi, f.q1, f.q3, f.total)
		b.ReportMetric(f.ns, ks[i].name+"-ns/accept")
		if i != ref {
			b.ReportMetric(f.ratio, ks[i].name+"/"+ks[ref].name)
		}
	}
	if b.N > 1 { // not the framework's first probe of b.N = 1
		b.Log("\n" + sb.String())
	}
}

// closeAll closes with linger 0 (RST): no TIME_WAIT, ports stay free.
func closeAll(cs []net.Conn) {
	for _, c := range cs {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}
