package drain_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// TestQueueDrain queues 20 clients at A while A's accept loop is stalled, then
// drains A. With a sibling B and migration on, B answers all 20; otherwise A
// does, through the accept-until-empty drain. In a PID namespace that kept its
// parent's /proc, the holder scan must still know A's process for itself
// (otherwise A is released, closed while listening, not shut down).
func TestQueueDrain(t *testing.T) {
	cases := []struct {
		name    string
		migrate int
		sibling bool
		plain   bool // http.Server.Shutdown on the wrapped listener, not drain.Server
		method  drain.Method
		by      string
		pidns   bool // a PID namespace of its own, with the parent's /proc
	}{
		{"migrate=1,sibling,plain-shutdown", 1, true, true, drain.MethodMigrate, "B", false},
		{"migrate=1,sibling", 1, true, false, drain.MethodMigrate, "B", false},
		{"migrate=1,sibling,pid-namespace", 1, true, false, drain.MethodMigrate, "B", true},
		{"migrate=0,sibling", 0, true, false, drain.MethodAccept, "A", false},
		{"migrate=1,lone", 1, false, false, drain.MethodAccept, "A", false},
		{"migrate=0,lone", 0, false, false, drain.MethodAccept, "A", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: tc.migrate, PIDNamespace: tc.pidns}, func(t *testing.T) {
				if tc.pidns && os.Getpid() != 1 {
					t.Fatalf("pid %d in a new PID namespace, want 1", os.Getpid())
				}
				queueDrain(t, tc.sibling, tc.plain, tc.method, tc.by)
			})
		})
	}
}

func queueDrain(t *testing.T, sibling, plain bool, method drain.Method, by string) {
	ctx := context.Background()
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	a, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := a.Addr().String()
	dl, err := drain.Wrap(a, drain.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	hsA := &http.Server{Handler: named("A"), ConnContext: g.connContext}
	ds := &drain.Server{HTTP: hsA}
	waitA := serve(t, func() error {
		if plain {
			return hsA.Serve(dl)
		}
		return ds.Serve(dl)
	})
	stalled := g.stall(t, addr)
	cs := netnstest.Queue(t, addr, 20, netnstest.ClientOptions{Payload: func(i int) []byte { return request(fmt.Sprintf("/q%d", i)) }})
	netnstest.WaitQueue(t, a, 20)
	if sibling {
		b, err := cfg.Listen(ctx, "tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		hsB := &http.Server{Handler: named("B")}
		waitB := serve(t, func() error { return hsB.Serve(b) })
		defer func() {
			hsB.Shutdown(ctx)
			waitB()
		}()
	}
	snap := netnstest.Snapshot(t)
	go func() { <-dl.Done(); close(g.open) }()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rep *drain.Report
	if plain {
		err = hsA.Shutdown(sctx)
		rep = dl.Report()
	} else {
		rep, err = ds.Shutdown(sctx)
	}
	if err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	d := snap.Delta(t, "TcpExt.TCPMigrateReqSuccess", "TcpExt.TCPMigrateReqFailure", "Tcp.OutRsts")
	if err := waitA(); !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v, want http.ErrServerClosed", err)
	}
	tally := cs.Await(10 * time.Second)
	t.Logf("report %+v; tally %v; counters %v", rep, tally, d)
	if got := servedBy(cs); got[by] != 20 {
		t.Errorf("answered by %v, want all 20 by %s (tally %v)", got, by, tally)
	}
	checkReport(t, rep, method, sibling, d)
	// The stalled connection was accepted before the stop. drain.Server
	// answers it; a plain http.Server.Shutdown drops its request (#65802).
	resp, _, err := readResponse(stalled, 5*time.Second)
	switch {
	case plain && err == nil:
		t.Errorf("plain Shutdown answered the stalled request: %s", resp.Status)
	case !plain && err != nil:
		t.Errorf("stalled request: %v", err)
	}
}

func checkReport(t *testing.T, rep *drain.Report, method drain.Method, sibling bool, d map[string]int64) {
	t.Helper()
	if rep == nil {
		t.Fatal("no report")
	}
	if rep.Method != method || rep.QueuedAtStop != 20 || rep.Remainder != 0 {
		t.Errorf("report method %s queued %d remainder %d, want %s, 20, 0", rep.Method, rep.QueuedAtStop, rep.Remainder, method)
	}
	if rep.Estimated != sibling {
		t.Errorf("estimated %v with sibling %v (%s)", rep.Estimated, sibling, rep.EstimateNote)
	}
	switch method {
	case drain.MethodMigrate:
		if rep.Migrated != 20 || d["TcpExt.TCPMigrateReqSuccess"] != 20 || rep.Accepted != 0 {
			t.Errorf("migrated %d (counter +%d), accepted %d; want 20, +20, 0", rep.Migrated, d["TcpExt.TCPMigrateReqSuccess"], rep.Accepted)
		}
	case drain.MethodAccept:
		if rep.Accepted != 20 || rep.Migrated != 0 || d["TcpExt.TCPMigrateReqSuccess"] != 0 {
			t.Errorf("accepted %d, migrated %d (counter +%d); want 20, 0, +0", rep.Accepted, rep.Migrated, d["TcpExt.TCPMigrateReqSuccess"])
		}
	}
	if d["TcpExt.TCPMigrateReqFailure"] != 0 || d["Tcp.OutRsts"] != 0 || rep.OutRsts != 0 {
		t.Errorf("resets: failure +%d, OutRsts +%d (report %d), want 0", d["TcpExt.TCPMigrateReqFailure"], d["Tcp.OutRsts"], rep.OutRsts)
	}
}

// TestAcceptAfterStop: a blocked Accept, and every later one, returns an
// error wrapping net.ErrClosed, also after SHUT_RDWR (where the kernel says
// EINVAL); Close is idempotent and safe from many goroutines.
func TestAcceptAfterStop(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		ctx := context.Background()
		cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
		a, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b, err := cfg.Listen(ctx, "tcp4", a.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		dl, err := drain.Wrap(a, drain.Options{})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := dl.Accept()
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond) // let Accept block (not required for the assertions)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := dl.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			}()
		}
		wg.Wait()
		if rep := dl.Report(); rep == nil || rep.Method != drain.MethodMigrate {
			t.Fatalf("report %+v, want method migrate", rep)
		}
		for i, err := range []error{<-errc, acceptErr(dl)} {
			var oe *net.OpError
			if !errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EINVAL) || !errors.As(err, &oe) || oe.Op != "accept" || oe.Addr.String() != a.Addr().String() {
				t.Errorf("accept %d after stop: %#v, want *net.OpError{Op: accept} wrapping net.ErrClosed", i, err)
			}
		}
		rep, err := dl.Stop(ctx)
		if err != nil || rep != dl.Report() {
			t.Errorf("Stop after Close: %v, %p != %p", err, rep, dl.Report())
		}
	})
}

func acceptErr(l net.Listener) error {
	c, err := l.Accept()
	if c != nil {
		c.Close()
	}
	return err
}

// TestWrapRefuses: listeners it cannot drain are refused with ErrNotSupported
// and left open.
func TestWrapRefuses(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		mp, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer mp.Close()
		ul, err := net.Listen("unix", t.TempDir()+"/s")
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		tl := listenTCP(t, "127.0.0.1:0")
		dl, err := drain.Wrap(tl, drain.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer dl.Close()
		for _, l := range []net.Listener{mp, ul, dl} {
			_, err := drain.Wrap(l, drain.Options{})
			var oe *net.OpError
			if !errors.Is(err, drain.ErrNotSupported) || !errors.As(err, &oe) || oe.Op != "wrap" || !strings.Contains(err.Error(), "listener cannot be drained: ") {
				t.Errorf("Wrap(%T %s): %v, want a *net.OpError wrapping ErrNotSupported that says the listener cannot be drained", l, l.Addr(), err)
			}
			if n := strings.Count(err.Error(), "wrap "); n != 1 || errors.As(oe.Err, new(*net.OpError)) {
				t.Errorf("Wrap(%T %s): %q names the operation %d times, want once", l, l.Addr(), err, n)
			}
		}
		if c, err := net.Dial("tcp4", mp.Addr().String()); err != nil {
			t.Errorf("refused listener was closed: %v", err)
		} else {
			c.Close()
		}
	})
}

// TestRelease: when another process holds the same socket, the stop closes
// only our fd; the socket keeps listening with its queue.
func TestRelease(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		tl := listenTCP(t, "127.0.0.1:0")
		addr := tl.Addr().String()
		f, err := tl.File()
		if err != nil {
			t.Fatal(err)
		}
		p := netnstest.StartHelper(t, "hold", netnstest.HelperOptions{ExtraFiles: []*os.File{f}})
		f.Close()
		waitLine(t, p, "holding")
		cs := netnstest.Queue(t, addr, 3, netnstest.ClientOptions{})
		dl, err := drain.Wrap(tl, drain.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := dl.Close(); err != nil {
			t.Fatal(err)
		}
		rep := dl.Report()
		if rep.Method != drain.MethodRelease || len(rep.OtherHolders) != 1 || rep.OtherHolders[0] != p.Cmd.Process.Pid ||
			rep.QueuedAtStop != 3 || rep.LeftQueued != 3 || rep.Remainder != 0 {
			t.Errorf("report %+v, want release to pid %d with 3 left queued", rep, p.Cmd.Process.Pid)
		}
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatalf("socket stopped listening: %v", err)
		}
		c.Close()
		p.Kill()
		if tally := cs.Await(3 * time.Second); tally[netnstest.Reset] != 3 {
			t.Errorf("after the holder died: %v, want 3 reset (they were still queued)", tally)
		}
	})
}

// holdMain holds fd 3 until killed.
func holdMain() {
	os.Stdout.WriteString("holding\n")
	f := os.NewFile(3, "held")
	defer f.Close()
	time.Sleep(time.Minute)
}

func waitLine(t *testing.T, p *netnstest.Proc, want string) {
	t.Helper()
	p.Stdout.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 256)
	n, err := p.Stdout.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), want) {
		t.Fatalf("helper said %q, %v; want %q", buf[:n], err, want)
	}
}

// TestDrainedNotTaken: connections the drain accepted but no Accept took are
// closed, by Stop when its ctx ends and by Close after CloseTimeout, so they
// do not leak (the harness counts fds).
func TestDrainedNotTaken(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		for _, useStop := range []bool{true, false} {
			tl := listenTCP(t, "127.0.0.1:0")
			cs := netnstest.Queue(t, tl.Addr().String(), 3, netnstest.ClientOptions{})
			dl, err := drain.Wrap(tl, drain.Options{CloseTimeout: 200 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if useStop {
				ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				_, err = dl.Stop(ctx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "3 drained connections") {
					t.Errorf("Stop: %v, want 3 untaken connections and deadline exceeded", err)
				}
			} else if err := dl.Close(); err != nil {
				t.Fatal(err)
			}
			if rep := dl.Report(); rep.Method != drain.MethodAccept || rep.Accepted != 3 {
				t.Errorf("report %+v, want 3 accepted", rep)
			}
			tally := cs.Await(5 * time.Second)
			if tally[netnstest.Answered] != 0 || tally[netnstest.Timeout] != 0 {
				t.Errorf("stop=%v: %v, want every client closed", useStop, tally)
			}
		}
	})
}

// steerer records MarkDraining calls and fails if told to.
type steerer struct {
	calls int
	fail  error
}

func (s *steerer) MarkDraining(c syscall.Conn) error {
	if _, err := c.SyscallConn(); err != nil {
		return err
	}
	s.calls++
	return s.fail
}

// TestSteererHook: the Steerer is told before the stop; its failure is
// recorded and the drain goes on.
func TestSteererHook(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		for _, fail := range []error{nil, errors.New("no program")} {
			s := &steerer{fail: fail}
			dl, err := drain.Wrap(listenTCP(t, "127.0.0.1:0"), drain.Options{Steerer: s})
			if err != nil {
				t.Fatal(err)
			}
			if err := dl.Close(); err != nil {
				t.Fatal(err)
			}
			rep := dl.Report()
			if s.calls != 1 || rep.Steered != (fail == nil) || (fail != nil && !strings.Contains(strings.Join(rep.Errors, ";"), "no program")) {
				t.Errorf("fail=%v: %d calls, report steered=%v errors=%v", fail, s.calls, rep.Steered, rep.Errors)
			}
		}
	})
}
