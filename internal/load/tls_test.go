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
// the connections it accepted and the requests it served by protocol and
// method, and notes every body that is not a GET's (none), Config.Post's
// or a pool's; with close set, every response carries Connection: close
// (over HTTP/2: a GOAWAY after it).
type tlsServer struct {
	url     string
	roots   *x509.CertPool
	mu      sync.Mutex
	conns   *atomic.Int64
	byProto map[string]int // "HTTP/2.0 POST": requests
	plain   int            // requests that did not come over TLS
	resumed int            // requests on a connection that resumed a session
	bad     []string       // method and body of the requests with an unexpected body
}

func newTLSServer(t *testing.T, close bool) *tlsServer {
	ts := &tlsServer{byProto: map[string]int{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		ts.mu.Lock()
		ts.byProto[r.Proto+" "+r.Method]++
		if r.TLS == nil {
			ts.plain++
		} else if r.TLS.DidResume {
			ts.resumed++
		}
		want := r.Method == http.MethodGet && len(b) == 0 ||
			r.Method == http.MethodPost && (string(b) == postBody || strings.HasPrefix(string(b), "zerodrop-load pool client "))
		if err != nil || !want {
			ts.bad = append(ts.bad, fmt.Sprintf("%s %q %v", r.Method, b, err))
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

// check: every request that did not fail came over TLS as want ("HTTP/2.0
// POST"), with the body its method sends, and the server accepted as many
// connections as the clients dialled.
func (ts *tlsServer) check(t *testing.T, res *Result, want string) {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	served := res.Requests - res.Failed
	if ts.plain != 0 || ts.byProto[want] != int(served) || len(ts.byProto) != 1 {
		t.Errorf("server saw %v (%d not over TLS), want %d requests %s", ts.byProto, ts.plain, served, want)
	}
	if len(ts.bad) > 0 {
		t.Errorf("%d requests with an unexpected body, first %s", len(ts.bad), ts.bad[0])
	}
	if ts.conns.Load() != res.Dials {
		t.Errorf("server accepted %d connections, the clients dialled %d", ts.conns.Load(), res.Dials)
	}
}

// method is the request method of a run with Config.Post set to post.
func method(post bool) string {
	if post {
		return http.MethodPost
	}
	return http.MethodGet
}

// Every HTTP/1.1 mode speaks TLS with an https URL: the hand-written
// client (a handshake per connection) and net/http's Transport, new
// connection per request or kept alive, GETs or POSTs, and the pool.
func TestTLS(t *testing.T) {
	for _, m := range modes {
		for _, post := range []bool{false, true} {
			t.Run(m.name+"-"+method(post), func(t *testing.T) {
				ts := newTLSServer(t, false)
				res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), Concurrency: 4, Requests: 40,
					Transport: m.transport, KeepAlive: m.keepAlive, Post: post, Header: "X-Generation"})
				if res.Requests != 40 || res.Failed != 0 || res.Headers["5"] != 40 {
					t.Fatalf("requests %d failed %d headers %v errors %v; want 40 ok from generation 5",
						res.Requests, res.Failed, res.Headers, res.Errors)
				}
				if !m.keepAlive && res.Dials != 40 || m.keepAlive && !m.transport && res.Dials > 4 {
					t.Errorf("%d dials for 40 requests by 4 workers, keep-alive %v", res.Dials, m.keepAlive)
				}
				ts.check(t, res, "HTTP/1.1 "+method(post))
			})
		}
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
		ts.check(t, res, "HTTP/1.1 POST")
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
// an HTTP/2 stream, GET or POST.
func TestHTTP2(t *testing.T) {
	for _, post := range []bool{false, true} {
		t.Run(method(post), func(t *testing.T) {
			ts := newTLSServer(t, false)
			res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), HTTP2: true, Concurrency: 32, Requests: 640,
				Post: post, Header: "X-Generation"})
			if res.Requests != 640 || res.Failed != 0 || res.Headers["5"] != 640 || res.Retried != 0 {
				t.Fatalf("requests %d failed %d retried %d headers %v errors %v; want 640 ok from generation 5",
					res.Requests, res.Failed, res.Retried, res.Headers, res.Errors)
			}
			// 32 workers, 8 per Transport: 4 connections.
			if res.Dials != 4 {
				t.Errorf("%d dials by 32 workers sharing connections 8 by 8, want 4", res.Dials)
			}
			ts.check(t, res, "HTTP/2.0 "+method(post))
		})
	}
}

// A server that sends a GOAWAY after every response: the streams the
// clients opened meanwhile are above its last stream id, and the Transport
// sends them again on a new connection. They count in Retried, once each
// in Requests. The request timeout (1 min) bounds a hang: at load 30 under
// the race detector, 10 s timed out 3 requests the server had answered, and
// the server's count no longer matched the clients'.
func TestHTTP2Retried(t *testing.T) {
	ts := newTLSServer(t, true)
	res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), HTTP2: true, Concurrency: 16,
		StreamsPerConn: 16, Requests: 400, Timeout: time.Minute})
	if res.Requests != 400 || res.Retried == 0 || res.Retried > res.Requests || res.Dials < 2 {
		t.Errorf("requests %d failed %d retried %d dials %d errors %v; want 400 requests, some of them retried on new connections",
			res.Requests, res.Failed, res.Retried, res.Dials, res.Errors)
	}
	t.Logf("requests %d, failed %d (%v), retried %d, dials %d", res.Requests, res.Failed, res.FailedByClass, res.Retried, res.Dials)
	ts.check(t, res, "HTTP/2.0 GET")
}

// The same server with POSTs the Transport cannot replay: the streams above
// a GOAWAY's last stream id, which the server never handled, fail instead
// of being sent again.
func TestHTTP2PostNotRetried(t *testing.T) {
	ts := newTLSServer(t, true)
	res := run(t, t.Context(), Config{URL: ts.url, TLS: ts.tls(), HTTP2: true, Post: true, Concurrency: 16,
		StreamsPerConn: 16, Requests: 400, Timeout: time.Minute})
	t.Logf("requests %d, failed %d (%v), retried %d, dials %d, errors %v", res.Requests, res.Failed,
		res.FailedByClass, res.Retried, res.Dials, res.Errors)
	if res.Requests != 400 || res.Failed == 0 || res.FailedByClass[Other] != res.Failed || res.Dials < 2 {
		t.Errorf("requests %d failed %d by class %v dials %d; want 400 requests, some of them failed (other)",
			res.Requests, res.Failed, res.FailedByClass, res.Dials)
	}
	// net/http says so in one of two ways: the stream was above the
	// GOAWAY's last stream id, or the request found its connection gone
	// away before its stream opened (net/http closed the body then).
	if e := res.Errors[Other]; !strings.Contains(e, "cannot retry err [http2: Transport received Server's graceful shutdown GOAWAY]") &&
		e != "net/http: cannot rewind body after connection loss" {
		t.Errorf("error %q: want net/http's cannot retry ... GOAWAY, or cannot rewind body", e)
	}
	// Each failed stream is one the server never handled.
	ts.check(t, res, "HTTP/2.0 POST")
}

// Config.Post's requests cannot be replayed: the body is a reader for which
// http.NewRequest sets no GetBody (it does for a *strings.Reader), and the
// requests the Transport-based clients send have none.
func TestPostUnreplayable(t *testing.T) {
	for _, tc := range []struct {
		body    io.Reader
		getBody bool
	}{{strings.NewReader(postBody), true}, {unreplayable(postBody), false}} {
		req, err := http.NewRequest(http.MethodPost, "https://127.0.0.1/", tc.body)
		if err != nil {
			t.Fatal(err)
		}
		if (req.GetBody != nil) != tc.getBody {
			t.Errorf("http.NewRequest with a %T: GetBody set %v, want %v", tc.body, req.GetBody != nil, tc.getBody)
		}
	}
	_, u, err := Config{URL: "https://127.0.0.1/p", HTTP2: true, Post: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req := newRequests(Config{Post: true}, u).request(t.Context())
		b, err := io.ReadAll(req.Body)
		if req.Method != http.MethodPost || req.GetBody != nil || req.ContentLength != int64(len(postBody)) ||
			err != nil || string(b) != postBody {
			t.Errorf("request: %s GetBody set %v, length %d, body %q (%v); want a POST of %q, no GetBody",
				req.Method, req.GetBody != nil, req.ContentLength, b, err, postBody)
		}
	}
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

// With a ClientSessionCache in Config.TLS, the raw client keeps one session
// cache per worker, which each connection (a new one per request here) takes
// as it is dialled and gives back: of 40 connections by 4 workers, 4 (one
// per cache) do a full handshake and 36 resume. The control, without a
// cache: none resumes.
func TestTLSSessionPerConnection(t *testing.T) {
	for _, cache := range []bool{true, false} {
		ts := newTLSServer(t, false)
		cfg := ts.tls()
		if cache {
			cfg.ClientSessionCache = tls.NewLRUClientSessionCache(0)
		}
		res := run(t, t.Context(), Config{URL: ts.url, TLS: cfg, Concurrency: 4, Requests: 40})
		if res.Requests != 40 || res.Failed != 0 || res.Dials != 40 {
			t.Fatalf("requests %d failed %d dials %d, want 40 ok on 40 connections", res.Requests, res.Failed, res.Dials)
		}
		ts.mu.Lock()
		resumed := ts.resumed
		ts.mu.Unlock()
		if want := map[bool]int{true: 36, false: 0}[cache]; resumed != want {
			t.Errorf("cache %v: %d of 40 connections resumed, want %d", cache, resumed, want)
		}
	}
}
