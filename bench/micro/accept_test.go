package micro

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
)

// kind is a listener kind under test.
type kind struct {
	name string
	ln   net.Listener
	took []time.Duration
}

// listeners opens one listener of every kind on 127.0.0.1:0; the first is
// the baseline, plain-TCP net.Listen. Cleanup closes them.
func listeners(b *testing.B) []*kind {
	ctx := context.Background()
	var tcp, mptcp net.ListenConfig
	tcp.SetMultipathTCP(false)
	mptcp.SetMultipathTCP(true)
	open := []struct {
		name string
		f    func() (net.Listener, error)
	}{
		{"net.Listen-tcp", func() (net.Listener, error) { return tcp.Listen(ctx, "tcp4", "127.0.0.1:0") }},
		{"net.Listen-mptcp", func() (net.Listener, error) { return mptcp.Listen(ctx, "tcp4", "127.0.0.1:0") }},
		{"reuseport", func() (net.Listener, error) { return reuseport.Listen(ctx, "tcp4", "127.0.0.1:0") }},
		{"drain", func() (net.Listener, error) {
			l, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			return drain.Wrap(l, drain.Options{})
		}},
		{"handoff", func() (net.Listener, error) {
			u, err := handoff.New(ctx, handoff.Config{Path: filepath.Join(b.TempDir(), "h.sock")})
			if err != nil {
				return nil, err
			}
			b.Cleanup(func() { u.Close() })
			return u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
		}},
	}
	var out []*kind
	for _, o := range open {
		l, err := o.f()
		if err != nil {
			b.Fatalf("%s: %v", o.name, err)
		}
		b.Cleanup(func() { l.Close() })
		out = append(out, &kind{name: o.name, ln: l})
	}
	return out
}

// BenchmarkAcceptKinds accepts b.N connections from each kind, alternating
// one Accept per kind in a rotating order, over connections dialled
// beforehand in batches. Reported: each kind's median ns per Accept, and
// its throughput relative to plain-TCP net.Listen (median time ratio; want
// at least 0.98).
func BenchmarkAcceptKinds(b *testing.B) {
	kinds := listeners(b)
	const batch = 64
	b.ResetTimer()
	for done := 0; done < b.N; done += batch {
		b.StopTimer()
		var conns []net.Conn
		for _, k := range kinds {
			conns = append(conns, dial(b, k.ln.Addr().String(), batch)...)
		}
		b.StartTimer()
		for j := range batch {
			for i := range kinds {
				k := kinds[(i+j)%len(kinds)]
				t0 := time.Now()
				c, err := k.ln.Accept()
				k.took = append(k.took, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
			}
		}
		b.StopTimer()
		closeAll(conns)
		b.StartTimer()
	}
	b.StopTimer()
	base := median(kinds[0].took)
	for _, k := range kinds {
		m := median(k.took)
		b.ReportMetric(float64(m.Nanoseconds()), k.name+"-ns/accept")
		if k != kinds[0] {
			b.ReportMetric(float64(base)/float64(m), k.name+"/tcp")
		}
	}
}

func dial(b *testing.B, addr string, n int) []net.Conn {
	out := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, c)
	}
	return out
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

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[len(d)/2]
}
