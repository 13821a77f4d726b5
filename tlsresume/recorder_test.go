package tlsresume

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// recListener makes every accepted connection a tls.Server over a Recorder.
type recListener struct {
	net.Listener
	capture *Capture
	cfg     *tls.Config
}

func (l recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(l.capture.Wrap(c), l.cfg), nil
}

// oneListener yields the connections sent on it.
type oneListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *oneListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *oneListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *oneListener) Addr() net.Addr { return &net.TCPAddr{} }

// tlsServer is an HTTPS server whose connections can be proven; handshakes
// counts the handshakes it did.
type tlsServer struct {
	srv        *http.Server
	addr       string
	cert       *netnstest.Cert
	handshakes atomic.Int32
	mu         sync.Mutex
	recs       []*Recorder
}

func startTLSServer(t *testing.T, name string) *tlsServer {
	t.Helper()
	s := &tlsServer{cert: netnstest.NewCert(t)}
	var capture Capture
	cfg := capture.Config(&tls.Config{
		Certificates: []tls.Certificate{s.cert.TLS},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		VerifyConnection: func(tls.ConnectionState) error {
			s.handshakes.Add(1)
			return nil
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	s.srv = &http.Server{
		Handler: handler(name),
		ConnState: func(c net.Conn, st http.ConnState) {
			r := c.(*tls.Conn).NetConn().(*Recorder)
			if st == http.StateNew {
				s.mu.Lock()
				s.recs = append(s.recs, r)
				s.mu.Unlock()
			}
			r.ConnState(st)
		},
	}
	go s.srv.Serve(recListener{l, &capture, cfg})
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.URL.Path)
	})
}

// prove waits (bounded) until r proves, and returns the last error if not.
func prove(r *Recorder) error {
	var err error
	for i := 0; i < 400; i++ {
		if err = r.ProveIdleHTTP(); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// take proves r (bounded) and takes it, failing the test otherwise.
func take(t *testing.T, r *Recorder) (net.Conn, *State) {
	t.Helper()
	if err := prove(r); err != nil {
		t.Fatalf("not proven: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, st, err := r.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return raw, st
}

// successor serves the connections of the States taken, as a second
// server would: over Conn, as plain HTTP/1.1.
func successor(t *testing.T) (*oneListener, *http.Server) {
	l := &oneListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: handler("successor")}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, srv
}

// get fetches path on the client's connection, and returns the body and the
// client's local address of the connection used.
func get(t *testing.T, c *http.Client, url string) (string, string) {
	t.Helper()
	var local string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { local = i.Conn.LocalAddr().String() }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)), local
}

// post sends body to url on the client's connection, as a POST of the
// length given (-1: unknown, sent chunked), and returns the response body.
func post(t *testing.T, c *http.Client, url, body string, length int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url, io.NopCloser(strings.NewReader(body)))
	req.ContentLength = length
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestHandOverInProcess: an idle HTTPS/1.1 keep-alive connection of Go's
// http.Transport is proven, taken from net/http and crypto/tls, and served
// on by Conn from the State: the client's next requests reuse the same
// connection and see no handshake; the second handover (from Conn's side)
// is the drain's concern, not tested here. The last request before the
// handover has no body, a body of a known length, or a chunked one (its
// end is found by following the framing: before, a request with a body
// was never proven).
func TestHandOverInProcess(t *testing.T) {
	body := strings.Repeat("a body\r\n\r\n", 700) + "end" // crosses records, holds what ends a head
	for _, last := range []struct {
		name   string
		length int64 // -2: a GET
	}{{"GET", -2}, {"POST Content-Length", int64(len(body))}, {"POST chunked", -1}} {
		t.Run(last.name, func(t *testing.T) {
			netnstest.CheckLeaks(t)
			s := startTLSServer(t, "first")
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.cert.Pool, MinVersion: tls.VersionTLS13}, MaxIdleConnsPerHost: 1}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			url := "https://" + s.addr
			for i := range 3 {
				body, _ := get(t, c, fmt.Sprintf("%s/%d", url, i))
				if body != fmt.Sprintf("first /%d", i) {
					t.Fatalf("body %q", body)
				}
			}
			_, local := get(t, c, url+"/last")
			if last.length != -2 {
				if got := post(t, c, url+"/post", body, last.length); got != "first /post" {
					t.Fatalf("POST: %q", got)
				}
			}
			s.mu.Lock()
			r := s.recs[0]
			s.mu.Unlock()
			raw, st := take(t, r)
			if st.ReadSeq == 0 || st.WriteSeq == 0 {
				t.Fatalf("sequence numbers read %d write %d", st.ReadSeq, st.WriteSeq)
			}
			conn, err := New(raw, st)
			if err != nil {
				t.Fatal(err)
			}
			l, _ := successor(t)
			l.conns <- conn
			for i := range 3 {
				body, again := get(t, c, fmt.Sprintf("%s/after%d", url, i))
				if body != fmt.Sprintf("successor /after%d", i) || again != local {
					t.Fatalf("after the handover: body %q on %s, want the successor's on %s", body, again, local)
				}
			}
			if got := post(t, c, url+"/post", body, -1); got != "successor /post" {
				t.Fatalf("POST after the handover: %q", got)
			}
			if n := s.handshakes.Load(); n != 1 {
				t.Fatalf("%d handshakes, want 1", n)
			}
		})
	}
}

// TestNotProvenTLS12: a TLS 1.2 connection is never proven.
func TestNotProvenTLS12(t *testing.T) {
	netnstest.CheckLeaks(t)
	s := startTLSServer(t, "first")
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.cert.Pool, MaxVersion: tls.VersionTLS12}}
	defer tr.CloseIdleConnections()
	get(t, &http.Client{Transport: tr}, "https://"+s.addr+"/")
	s.mu.Lock()
	r := s.recs[0]
	s.mu.Unlock()
	err := prove(r)
	t.Logf("TLS 1.2: %v", err)
	if !errors.Is(err, ErrNotProven) {
		t.Fatalf("TLS 1.2: %v, want ErrNotProven", err)
	}
}
