package load

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tlsServer is a local HTTPS server (HTTP/2 offered by ALPN) that counts
// the connections it accepted and the requests it served by protocol; with
// close set, every response carries Connection: close (over HTTP/2: a
// GOAWAY after it).
type tlsServer struct {
	url     string
	roots   *x509.CertPool
	mu      sync.Mutex
	conns   *atomic.Int64
	byProto map[string]int
	plain   int // requests that did not come over TLS
}

func newTLSServer(t *testing.T, close bool) *tlsServer {
	ts := &tlsServer{byProto: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.byProto[r.Proto]++
		if r.TLS == nil {
			ts.plain++
		}
		ts.mu.Unlock()
		if close {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("X-Generation", "5")
		fmt.Fprintln(w, "ok")
	}))
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes failed on purpose
	ts.conns = countConns(srv)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ts.url = srv.URL + "/"
	ts.roots = x509.NewCertPool()
	ts.roots.AddCert(srv.Certificate())
	return ts
}

func (ts *tlsServer) tls() *tls.Config { return &tls.Config{RootCAs: ts.roots} }

// check: every request came over TLS in proto, and the server accepted as
// many connections as the clients dialled.
func (ts *tlsServer) check(t *testing.T, res *Result, proto string) {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.plain != 0 || ts.byProto[proto] != int(res.Requests) || len(ts.byProto) != 1 {
		t.Errorf("server saw %v (%d not over TLS), want %d requests over %s", ts.byProto, ts.plain, res.Requests, proto)
	}
	if ts.conns.Load() != res.Dials {
		t.Errorf("server accepted %d connections, the clients dialled %d", ts.conns.Load(), res.Dials)
	}
}

// Every HTTP/1.1 mode speaks TLS with an https URL: the hand-written
// client (a handshake per connection) and net/http's Transport, new
// connection per request or kept alive, and the pool.
func TestTLS(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			ts := newTLSServer(t, false)
			res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), Concurrency: 4, Requests: 40,
				Transport: m.transport, KeepAlive: m.keepAlive, Header: "X-Generation"})
			if res.Requests != 40 || res.Failed != 0 || res.Headers["5"] != 40 {
				t.Fatalf("requests %d failed %d headers %v errors %v; want 40 ok from generation 5",
					res.Requests, res.Failed, res.Headers, res.Errors)
			}
			if !m.keepAlive && res.Dials != 40 || m.keepAlive && !m.transport && res.Dials > 4 {
				t.Errorf("%d dials for 40 requests by 4 workers, keep-alive %v", res.Dials, m.keepAlive)
			}
			ts.check(t, res, "HTTP/1.1")
		})
	}
	t.Run("pool", func(t *testing.T) {
		ts := newTLSServer(t, false)
		// The pool POSTs; the server answers any method.
		res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), Pool: 4, PoolMin: time.Millisecond,
			PoolMax: 5 * time.Millisecond, Requests: 40})
		if res.Requests != 40 || res.Failed != 0 || res.Dials != 4 {
			t.Errorf("requests %d failed %d dials %d errors %v; want 40 ok on 4 connections",
				res.Requests, res.Failed, res.Dials, res.Errors)
		}
		ts.check(t, res, "HTTP/1.1")
	})
}

// A certificate the client does not trust fails every handshake: each
// request fails, the raw client naming its local address.
func TestTLSHandshakeFails(t *testing.T) {
	ts := newTLSServer(t, false)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			res := run(t, t.Context(), Config{URL: ts.url, TLS: &tls.Config{RootCAs: x509.NewCertPool()},
				Concurrency: 2, Requests: 6, Transport: m.transport, KeepAlive: m.keepAlive})
			if res.Requests != 6 || res.Failed != 6 || res.FailedByClass[Other] != 6 {
				t.Fatalf("requests %d failed %d by class %v errors %v; want 6 other (unknown authority)",
					res.Requests, res.Failed, res.FailedByClass, res.Errors)
			}
			if e := res.Errors[Other]; !strings.Contains(e, "certificate") ||
				strings.Contains(e, "(local 127.0.0.1:") == m.transport {
				t.Errorf("error %q: want a certificate error, naming the local address if raw", e)
			}
		})
	}
}

// HTTP/2: StreamsPerConn workers share each connection, every request is
// an HTTP/2 stream.
func TestHTTP2(t *testing.T) {
	ts := newTLSServer(t, false)
	res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), HTTP2: true, Concurrency: 32, Requests: 640,
		Header: "X-Generation"})
	if res.Requests != 640 || res.Failed != 0 || res.Headers["5"] != 640 || res.Retried != 0 {
		t.Fatalf("requests %d failed %d retried %d headers %v errors %v; want 640 ok from generation 5",
			res.Requests, res.Failed, res.Retried, res.Headers, res.Errors)
	}
	// 32 workers, 8 per Transport: 4 connections.
	if res.Dials != 4 {
		t.Errorf("%d dials by 32 workers sharing connections 8 by 8, want 4", res.Dials)
	}
	ts.check(t, res, "HTTP/2.0")
}

// A server that sends a GOAWAY after every response: the streams the
// clients opened meanwhile are above its last stream id, and the Transport
// sends them again on a new connection. They count in Retried, once each
// in Requests.
func TestHTTP2Retried(t *testing.T) {
	ts := newTLSServer(t, true)
	res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), HTTP2: true, Concurrency: 16,
		StreamsPerConn: 16, Requests: 400, Timeout: 10 * time.Second})
	if res.Requests != 400 || res.Retried == 0 || res.Retried > res.Requests || res.Dials < 2 {
		t.Errorf("requests %d failed %d retried %d dials %d errors %v; want 400 requests, some of them retried on new connections",
			res.Requests, res.Failed, res.Retried, res.Dials, res.Errors)
	}
	t.Logf("requests %d, failed %d (%v), retried %d, dials %d", res.Requests, res.Failed, res.FailedByClass, res.Retried, res.Dials)
	ts.check(t, res, "HTTP/2.0")
}

func TestTLSConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "http://127.0.0.1/", TLS: &tls.Config{}},
		{URL: "http://127.0.0.1/", HTTP2: true},
		{URL: "https://127.0.0.1/", HTTP2: true, Pool: 2},
		{URL: "https://127.0.0.1/", HTTP2: true, StreamsPerConn: -1},
	} {
		if _, err := New(cfg); err == nil || !strings.HasPrefix(err.Error(), "load: ") {
			t.Errorf("New(%+v): %v, want a load: error", cfg, err)
		}
	}
}
