package drain_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestShutdownTrap: connections accepted before the drain whose request bytes
// arrive just after it began. http.Server.Shutdown drops every one of them
// (golang/go#65802); drain.Server answers every one, with Connection: close.
func TestShutdownTrap(t *testing.T) {
	for _, plain := range []bool{true, false} {
		t.Run(map[bool]string{true: "http.Server", false: "drain.Server"}[plain], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				shutdownTrap(t, plain)
			})
		})
	}
}

func shutdownTrap(t *testing.T, plain bool) {
	const n = 10
	tl := listenTCP(t, "127.0.0.1:0")
	ts := newTrapServer(t, tl.Addr().String(), n, 0, func(hs *http.Server, ds *drain.Server) error {
		if plain {
			return hs.Serve(tl)
		}
		return ds.Serve(tl)
	})
	hs, ds, conns, wait := ts.hs, ts.ds, ts.conns, ts.wait
	began := make(chan struct{})
	hs.RegisterOnShutdown(func() { close(began) })
	done := ts.shutdown(t, plain, 10*time.Second)
	if plain {
		<-began
	} else {
		waitDraining(t, ds)
	}
	answered := 0
	for _, c := range conns {
		if _, err := c.Write(request("/late")); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		resp, _, err := readResponse(c, 5*time.Second)
		switch {
		case err == nil && resp.StatusCode == 200 && resp.Close:
			answered++
		case err == nil:
			t.Errorf("reply %s, close=%v", resp.Status, resp.Close)
		case plain && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF):
			t.Errorf("plain Shutdown: %v, want EOF", err)
		}
	}
	rep := <-done
	wait()
	if plain && answered != 0 {
		t.Errorf("plain Shutdown answered %d of %d late requests; Go should drop them all", answered, n)
	}
	if !plain && (answered != n || rep.HTTP.Completed != n || len(rep.HTTP.Forced) != 0) {
		t.Errorf("drain.Server answered %d of %d (report completed %d, forced %v)", answered, n, rep.HTTP.Completed, rep.HTTP.Forced)
	}
}

// trapServer is an http.Server, drained by a drain.Server (NewConnGrace
// grace; 0: the default) or not, with n connections accepted that have sent
// nothing yet.
type trapServer struct {
	hs    *http.Server
	ds    *drain.Server
	conns []net.Conn
	wait  func() error // for serveFn to return
}

func newTrapServer(t *testing.T, addr string, n int, grace time.Duration, serveFn func(*http.Server, *drain.Server) error) *trapServer {
	t.Helper()
	var fresh atomic.Int32
	hs := &http.Server{Handler: named("A"), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			fresh.Add(1)
		}
	}}
	ts := &trapServer{hs: hs, ds: &drain.Server{HTTP: hs, NewConnGrace: grace}, conns: make([]net.Conn, n)}
	ts.wait = serve(t, func() error { return serveFn(ts.hs, ts.ds) })
	for i := range ts.conns {
		ts.conns[i] = dial(t, addr)
	}
	for deadline := time.Now().Add(5 * time.Second); fresh.Load() < int32(n); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections accepted", fresh.Load(), n)
		}
	}
	return ts
}

// shutdown starts http.Server.Shutdown (plain) or drain.Server.Shutdown,
// bounded by d; the channel gets the drain's report (nil when plain).
func (ts *trapServer) shutdown(t *testing.T, plain bool, d time.Duration) <-chan *drain.Report {
	done := make(chan *drain.Report, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var rep *drain.Report
		var err error
		if plain {
			err = ts.hs.Shutdown(ctx)
		} else {
			rep, err = ts.ds.Shutdown(ctx)
		}
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
		done <- rep
	}()
	return done
}
