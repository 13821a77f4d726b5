package drain_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// TestWrapNil: a nil listener, untyped or typed, is refused with
// ErrNilListener instead of a panic.
func TestWrapNil(t *testing.T) {
	for _, l := range []net.Listener{nil, (*net.TCPListener)(nil), (*reuseport.Listener)(nil), &reuseport.Listener{}, (*drain.Listener)(nil)} {
		dl, err := drain.Wrap(l, drain.Options{})
		if dl != nil || !errors.Is(err, drain.ErrNilListener) {
			t.Errorf("Wrap(%#v): %v, %v; want nil and ErrNilListener", l, dl, err)
		}
	}
}

// TestServerWithoutHTTP: a Server with a nil HTTP returns ErrNoHTTPServer
// from Serve (closing the listener it was given, as it owns it) and from
// Shutdown, instead of a panic.
func TestServerWithoutHTTP(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		tl := listenTCP(t, "127.0.0.1:0")
		addr := tl.Addr().String()
		ds := &drain.Server{}
		if err := ds.Serve(tl); !errors.Is(err, drain.ErrNoHTTPServer) {
			t.Errorf("Serve: %v, want ErrNoHTTPServer", err)
		}
		if c, err := net.Dial("tcp4", addr); err == nil {
			c.Close()
			t.Errorf("Serve without HTTP left %s listening", addr)
		}
		rep, err := (&drain.Server{}).Shutdown(context.Background())
		if rep != nil || !errors.Is(err, drain.ErrNoHTTPServer) {
			t.Errorf("Shutdown: %v, %v; want nil and ErrNoHTTPServer", rep, err)
		}
	})
}

// TestConcurrentShutdown: Shutdown called from several goroutines at once
// drains once; every caller gets the same figures in a report of its own, so
// that changing one changes no other (run with -race: the calls used to race
// on the shared report).
func TestConcurrentShutdown(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		p := newPhase(t, nil)
		reports := 0
		p.ds.OnReport = func(*drain.Report) { reports++ }
		const n = 8
		reps := make([]*drain.Report, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reps[i], errs[i] = p.ds.Shutdown(context.Background())
			}()
		}
		wg.Wait()
		if err := p.wait(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
		if reports != 1 {
			t.Errorf("OnReport called %d times, want 1", reports)
		}
		first, _ := json.Marshal(reps[0])
		for i := range n {
			if errs[i] != nil || reps[i] == nil || reps[i].HTTP == nil {
				t.Fatalf("Shutdown %d: %+v, %v", i, reps[i], errs[i])
			}
			if b, _ := json.Marshal(reps[i]); string(b) != string(first) {
				t.Errorf("report %d differs:\n%s\n%s", i, b, first)
			}
		}
		// Changing one report changes no other.
		want, wantErrs := *reps[1].HTTP, append([]string(nil), reps[1].Errors...)
		reps[0].Errors = append(reps[0].Errors, "changed")
		reps[0].HTTP.Completed = 1000
		reps[0].HTTP.Forced = append(reps[0].HTTP.Forced, drain.ForcedConn{Remote: "x"})
		for i := 1; i < n; i++ {
			if reps[i] == reps[0] || reps[i].HTTP == reps[0].HTTP {
				t.Fatalf("report %d shares memory with report 0", i)
			}
			if !reflect.DeepEqual(*reps[i].HTTP, want) || !reflect.DeepEqual(reps[i].Errors, wantErrs) {
				t.Errorf("report %d changed with report 0: %+v", i, reps[i].HTTP)
			}
		}
		// A later call returns the same figures at once.
		late, err := p.ds.Shutdown(context.Background())
		if b, _ := json.Marshal(late); err != nil || string(b) != string(first) {
			t.Errorf("a later Shutdown: %s, %v", b, err)
		}
	})
}

// TestServeNil: Serve with a nil listener, untyped or typed, returns an error
// matching ErrNilListener instead of a panic, and leaves the Server unused: a
// Shutdown afterwards returns at once.
func TestServeNil(t *testing.T) {
	netnstest.CheckLeaks(t)
	for _, l := range []net.Listener{nil, (*net.TCPListener)(nil), (*reuseport.Listener)(nil), &reuseport.Listener{}, (*drain.Listener)(nil)} {
		ds := &drain.Server{HTTP: &http.Server{}}
		var oe *net.OpError
		if err := ds.Serve(l); !errors.Is(err, drain.ErrNilListener) || !errors.As(err, &oe) || oe.Op != "serve" {
			t.Errorf("Serve(%#v): %v; want a serve *net.OpError matching ErrNilListener", l, err)
		}
		if _, err := ds.Shutdown(context.Background()); err != nil {
			t.Errorf("Shutdown after Serve(%#v): %v", l, err)
		}
		// Without HTTP too: the nil listener is named, not dereferenced.
		if err := (&drain.Server{}).Serve(l); !errors.Is(err, drain.ErrNilListener) {
			t.Errorf("Serve(%#v) without HTTP: %v; want ErrNilListener", l, err)
		}
	}
}

// TestShutdownWaiterContext: a Shutdown called while another drains waits
// with its own ctx: when that ends first it returns a nil report and an error
// naming the address and wrapping its ctx.Err(), and the drain goes on to
// serve the request in flight; a call after the drain gets its report.
func TestShutdownWaiterContext(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		p := newPhase(t, nil)
		c := dial(t, p.addr)
		c.Write(keepAliveRequest("/block"))
		p.awaitHandler(t)
		res := p.shutdown(context.Background())
		waitDraining(t, p.ds)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		rep, err := p.ds.Shutdown(ctx)
		var oe *net.OpError
		if rep != nil || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) || oe.Op != "shutdown" || oe.Addr == nil || oe.Addr.String() != p.addr {
			t.Errorf("waiting Shutdown: %+v, %v; want nil and a shutdown *net.OpError on %s wrapping DeadlineExceeded", rep, err, p.addr)
		}
		select {
		case r := <-res:
			t.Fatalf("the drain ended with the waiter's ctx: %v", r.err)
		default:
		}
		close(p.release)
		if resp, body, err := readResponse(c, 10*time.Second); err != nil || resp.StatusCode != 200 || body != "done\n" {
			t.Fatalf("request in flight: %v %v %q", resp, err, body)
		}
		r := <-res
		if r.err != nil || r.rep.HTTP.Completed != 1 {
			t.Fatalf("drain: %+v, %v; want 1 completed", r.rep.HTTP, r.err)
		}
		late, err := p.ds.Shutdown(ctx) // ended, but the drain is over
		if err != nil || late == nil || late == r.rep || late.HTTP.Completed != 1 {
			t.Errorf("a Shutdown after the drain: %+v, %v; want a copy of its report", late, err)
		}
		if err := p.wait(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
	})
}

// TestShutdownReportNotShared: the report Shutdown returns shares no memory
// with the report of the *Listener it served (its Stop and Report): changing
// the listener's report changes no Shutdown report, earlier or later, and the
// listener's report stays the listener's, without HTTP.
func TestShutdownReportNotShared(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		dl, err := drain.Wrap(listenTCP(t, "127.0.0.1:0"), drain.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ds := &drain.Server{HTTP: &http.Server{Handler: http.NotFoundHandler()}}
		wait := serve(t, func() error { return ds.Serve(dl) })
		// Serve has begun once a connection is answered.
		c := dial(t, dl.Addr().String())
		c.Write(request("/"))
		if _, _, err := readResponse(c, 10*time.Second); err != nil {
			t.Fatalf("server not serving: %v", err)
		}
		c.Close()
		first, err := ds.Shutdown(context.Background())
		if err != nil || first.HTTP == nil {
			t.Fatalf("Shutdown: %+v, %v", first, err)
		}
		if err := wait(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
		want, _ := json.Marshal(first)
		lr, err := dl.Stop(context.Background())
		if err != nil || lr == nil || lr != dl.Report() {
			t.Fatalf("listener Stop after the drain: %p, %v; Report %p", lr, err, dl.Report())
		}
		if lr.HTTP != nil {
			t.Errorf("the listener's report has the Server's HTTP report: %+v", lr.HTTP)
		}
		lr.Method = "changed"
		lr.Errors = append(lr.Errors, "changed")
		if lr.HTTP != nil {
			lr.HTTP.Completed = 1000
		}
		late, err := ds.Shutdown(context.Background())
		if b, _ := json.Marshal(late); err != nil || string(b) != string(want) {
			t.Errorf("a later Shutdown after changing the listener's report:\n%s, %v\nwant\n%s", b, err, want)
		}
		if b, _ := json.Marshal(first); string(b) != string(want) {
			t.Errorf("the first Shutdown's report changed with the listener's:\n%s", b)
		}
	})
}
