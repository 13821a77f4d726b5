package handoff

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
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

// BenchmarkPassConns measures passing n idle connections to a successor, in
// one process: PassConns (which closes the predecessor's ends) until every
// connection has reached the successor's handler (validated, acked, made a
// *net.TCPConn). The connections (127.0.0.1
// in a fresh namespace when run as root through -run, else wherever the
// benchmark runs; no traffic beyond their handshakes) and the listener
// handoff are set up outside the timer. ms is per handoff of all n.
func BenchmarkPassConns(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run("conns="+strconv.Itoa(n), func(b *testing.B) { benchPassConns(b, n) })
	}
}

func benchPassConns(b *testing.B, n int) {
	ctx := context.Background()
	cfg := Config{Path: b.TempDir() + "/h.sock"}
	old, lns := benchGen(b, cfg, 1)
	defer func() { closeAll(lns); old.Close() }()
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		// The clients live in a process of their own: with their ends here
		// too, 10,000 connections would need more fds than RLIMIT_NOFILE
		// (20,000 here) allows without CAP_SYS_RESOURCE.
		in, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		d := netnstest.StartHelper(b, "dialer", netnstest.HelperOptions{Stdin: in, Env: []string{
			"ZD_DIAL=" + lns[0].Addr().String(), "ZD_DIAL_N=" + strconv.Itoa(n)}})
		in.Close()
		conns := make([]PassedConn, n)
		for i := range n {
			s, err := lns[0].Accept()
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = PassedConn{Listener: "l0", Conn: s.(*net.TCPConn)}
		}
		u, err := New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan *net.TCPConn, n)
		if err := u.HandleConns("l0", func(pc PassedConn) { got <- pc.Conn }); err != nil {
			b.Fatal(err)
		}
		next, err := u.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		if err := u.Ready(); err != nil {
			b.Fatal(err)
		}
		<-old.Exit()
		b.StartTimer()
		t0 := time.Now()
		if passed, err := old.PassConns(ctx, conns); err != nil || passed != n {
			b.Fatalf("PassConns: %d of %d, %v", passed, n, err)
		}
		recv := make([]*net.TCPConn, n)
		for i := range recv {
			recv[i] = <-got
		}
		took = append(took, time.Since(t0))
		b.StopTimer()
		for _, c := range recv {
			c.Close()
		}
		w.Close() // the dialer closes its ends and exits
		if err := d.Wait(ctx); err != nil {
			b.Fatalf("dialer: %v", err)
		}
		closeAll(lns)
		old.Close()
		old, lns = u, []net.Listener{next}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds())/float64(n)/1000, "us/conn")
}

// dialerMain opens ZD_DIAL_N connections to ZD_DIAL and holds them until
// its stdin closes.
func dialerMain() {
	n, _ := strconv.Atoi(os.Getenv("ZD_DIAL_N"))
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp4", os.Getenv("ZD_DIAL"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "dialer:", err)
			os.Exit(1)
		}
		conns = append(conns, c)
	}
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}
