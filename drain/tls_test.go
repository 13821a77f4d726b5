package drain_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestServeTLSTrap: 20 clients connected before the stop complete their TLS
// handshake and send their request 20 ms after the listener stopped.
// http.Server.ServeTLS with Shutdown answers none of them (golang/go#65802
// over TLS); drain.Server.ServeTLS answers 20/20, with Connection: close, and
// its report counts them.
func TestServeTLSTrap(t *testing.T) {
	for _, plain := range []bool{true, false} {
		t.Run(map[bool]string{true: "http.Server", false: "drain.Server"}[plain], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				tlsTrap(t, plain)
			})
		})
	}
}

func tlsTrap(t *testing.T, plain bool) {
	const n = 20
	cert := netnstest.NewCert(t)
	tl := listenTCP(t, "127.0.0.1:0")
	addr := tl.Addr().String()
	var fresh atomic.Int32
	hs := &http.Server{Handler: named("A"), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			fresh.Add(1)
		}
	}}
	ds := &drain.Server{HTTP: hs}
	wait := serve(t, func() error {
		if plain {
			return hs.ServeTLS(tl, cert.CertFile, cert.KeyFile)
		}
		return ds.ServeTLS(tl, cert.CertFile, cert.KeyFile)
	})
	conns := make([]net.Conn, n)
	for i := range conns {
		conns[i] = dial(t, addr)
	}
	for deadline := time.Now().Add(5 * time.Second); fresh.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections accepted", fresh.Load(), n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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
	waitRefused(t, addr)
	time.Sleep(20 * time.Millisecond) // the clients are late, on purpose
	answered := 0
	for _, c := range conns {
		tc := tls.Client(c, cert.Client("http/1.1"))
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := tc.Write(request("/late")); err != nil {
			t.Logf("handshake or write: %v", err)
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		switch {
		case err == nil && resp.StatusCode == 200 && resp.Close:
			answered++
		case err == nil:
			t.Errorf("reply %s, close=%v", resp.Status, resp.Close)
		case !plain:
			t.Errorf("drain.Server: %v", err)
		}
		tc.Close()
	}
	rep := <-done
	wait()
	if plain && answered != 0 {
		t.Errorf("plain Shutdown answered %d of %d late requests; Go should drop them all", answered, n)
	}
	if plain {
		return
	}
	h := rep.HTTP
	if answered != n || h.Completed != n || h.TLSPending != n || h.TLSPendingServed != n || len(h.Forced) != 0 || h.SilentClosed != 0 {
		t.Errorf("drain.Server answered %d of %d (report: completed %d, tls pending %d served %d, silent %d, forced %v)",
			answered, n, h.Completed, h.TLSPending, h.TLSPendingServed, h.SilentClosed, h.Forced)
	}
}
