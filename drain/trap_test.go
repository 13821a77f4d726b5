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
	var fresh atomic.Int32
	hs := &http.Server{Handler: named("A"), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			fresh.Add(1)
		}
	}}
	ds := &drain.Server{HTTP: hs}
	began := make(chan struct{})
	hs.RegisterOnShutdown(func() { close(began) })
	wait := serve(t, func() error {
		if plain {
			return hs.Serve(tl)
		}
		return ds.Serve(tl)
	})
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dial(t, tl.Addr().String())
	}
	for deadline := time.Now().Add(5 * time.Second); fresh.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections accepted", fresh.Load(), n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan *drain.Report, 1)
	go func() {
		var rep *drain.Report
		var err error
		if plain {
			err = hs.Shutdown(ctx)
		} else {
			rep, err = ds.Shutdown(ctx)
		}
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
		done <- rep
	}()
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
