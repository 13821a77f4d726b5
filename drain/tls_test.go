package drain_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"sync"
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
	ts := newTrapServer(t, addr, n, func(hs *http.Server, ds *drain.Server) error {
		if plain {
			return hs.ServeTLS(tl, cert.CertFile, cert.KeyFile)
		}
		return ds.ServeTLS(tl, cert.CertFile, cert.KeyFile)
	})
	conns, wait := ts.conns, ts.wait
	done := ts.shutdown(t, plain, 20*time.Second)
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
	// TLSPending also counts a waitRefused probe that connected just before
	// the listener stopped (the drain accepts it; it closes without a
	// handshake, logged as "TLS handshake error: EOF"): at least n.
	if answered != n || h.Completed != n || h.TLSPending < n || h.TLSPendingServed != n || len(h.Forced) != 0 || h.SilentClosed != 0 {
		t.Errorf("drain.Server answered %d of %d (report: completed %d, tls pending %d served %d, silent %d, forced %v)",
			answered, n, h.Completed, h.TLSPending, h.TLSPendingServed, h.SilentClosed, h.Forced)
	}
}

// TestRollingTLS: two HTTPS worker processes in a reuseport group
// (ServeTLS), one drained and replaced 10 times, with migration on, under
// Go's http.Transport over TLS: a new connection per request (HTTP/1.1) and
// HTTP/2 (ALPN h2) with keep-alive, many streams on few connections. Not one
// request may fail.
func TestRollingTLS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		cert := netnstest.NewCert(t)
		l := listenTCP(t, "127.0.0.1:0") // reserve a port number
		addr := l.Addr().String()
		l.Close()
		env := []string{envWorkerCert + "=" + cert.CertFile, envWorkerKey + "=" + cert.KeyFile}
		workers := []*worker{spawnWorker(t, addr, env...).listen(t), spawnWorker(t, addr, env...).listen(t)}
		spare := spawnWorker(t, addr, env...)
		h1 := &http.Transport{TLSClientConfig: cert.Client(), DisableKeepAlives: true,
			TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
		h2 := &http.Transport{TLSClientConfig: cert.Client(), ForceAttemptHTTP2: true}
		defer h2.CloseIdleConnections()
		perRequest, streams := &stats{}, &stats{}
		var h2Proto atomic.Int64
		get := func(tr *http.Transport) error {
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			resp, err := c.Get("https://" + addr + "/")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.ProtoMajor == 2 {
				h2Proto.Add(1)
			}
			_, err = io.Copy(io.Discard, resp.Body)
			return err
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if i < 4 {
					loop(stop, perRequest, func() error { return get(h1) })
				} else {
					loop(stop, streams, func() error { return get(h2) })
				}
			}()
		}
		var pending, pendingServed, h2Conns int
		for roll := 0; roll < 10; roll++ {
			time.Sleep(200 * time.Millisecond) // load between rolls
			next := spare.listen(t)
			spare = spawnWorker(t, addr, env...)
			rep := workers[0].drain(t)
			workers = append(workers[1:], next)
			if rep.Method != drain.MethodMigrate || len(rep.HTTP.Forced) != 0 {
				t.Errorf("roll %d: method %s (%s), forced %v", roll, rep.Method, rep.Why, rep.HTTP.Forced)
			}
			pending += rep.HTTP.TLSPending
			pendingServed += rep.HTTP.TLSPendingServed
			h2Conns += rep.HTTP.HTTP2
		}
		close(stop)
		wg.Wait()
		for _, w := range workers {
			w.drain(t)
		}
		spare.start.Close()
		t.Logf("10 rolls: HTTPS new connection per request %v; HTTP/2 %v (%d answered over h2); reports: TLS pending at the stop %d, served %d; HTTP/2 connections told to go away %d",
			perRequest, streams, h2Proto.Load(), pending, pendingServed, h2Conns)
		if perRequest.failed.Load() != 0 || streams.failed.Load() != 0 || perRequest.ok.Load() < 200 || streams.ok.Load() < 200 {
			t.Errorf("want 0 failed and >= 200 each: per request %v; HTTP/2 %v", perRequest, streams)
		}
		if h2Proto.Load() != streams.ok.Load() {
			t.Errorf("%d of %d HTTP/2 client requests answered over HTTP/2", h2Proto.Load(), streams.ok.Load())
		}
	})
}
