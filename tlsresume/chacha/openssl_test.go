package chacha_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/tlsresume"
)

// This is tlsresume's TestOpenSSLKeyUpdate in TLS_CHACHA20_POLY1305_SHA256,
// through the public API: Capture, Recorder, ProveIdleHTTP, Take, New.

// countConn counts the bytes read from and written to the socket under a
// Recorder.
type countConn struct {
	net.Conn
	read, written atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// recListener makes every accepted connection a tls.Server over a Recorder
// over a countConn.
type recListener struct {
	net.Listener
	s *tlsServer
}

func (l recListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	cc := &countConn{Conn: c}
	r := l.s.capture.Wrap(cc)
	l.s.mu.Lock()
	l.s.recs = append(l.s.recs, r)
	l.s.counts = append(l.s.counts, cc)
	l.s.mu.Unlock()
	return tls.Server(r, l.s.cfg), nil
}

// tlsServer is an HTTPS server whose connections can be proven; handshakes
// counts the handshakes it did.
type tlsServer struct {
	addr       string
	capture    tlsresume.Capture
	cfg        *tls.Config
	handshakes atomic.Int32
	mu         sync.Mutex
	recs       []*tlsresume.Recorder
	counts     []*countConn
}

func startTLSServer(t *testing.T, name string) *tlsServer {
	t.Helper()
	s := &tlsServer{}
	cert := netnstest.NewCert(t)
	s.cfg = s.capture.Config(&tls.Config{
		Certificates: []tls.Certificate{cert.TLS},
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
	srv := &http.Server{
		Handler: handler(name),
		ConnState: func(c net.Conn, st http.ConnState) {
			c.(*tls.Conn).NetConn().(*tlsresume.Recorder).ConnState(st)
		},
	}
	go srv.Serve(recListener{l, s})
	t.Cleanup(func() { srv.Close() })
	return s
}

func handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.URL.Path)
	})
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

// successor serves the connections of the States taken, as a second
// server would: over Conn, as plain HTTP/1.1.
func successor(t *testing.T) *oneListener {
	l := &oneListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: handler("successor")}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l
}

// prove waits (bounded) until r proves, and returns the last error if not.
func prove(r *tlsresume.Recorder) error {
	var err error
	for i := 0; i < 400; i++ {
		if err = r.ProveIdleHTTP(); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// waitBytes waits (bounded) until more than n bytes were counted.
func waitBytes(t *testing.T, what string, c *atomic.Int64, n int64) {
	t.Helper()
	for i := 0; i < 400; i++ {
		if c.Load() > n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no %s", what)
}

// sClient is an openssl s_client process talking to addr.
type sClient struct {
	stdin io.WriteCloser
	lines chan string
}

func startSClient(t *testing.T, addr, suite string) *sClient {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	cmd := exec.Command(path, "s_client", "-connect", addr, "-tls1_3", "-ciphersuites", suite, "-crlf", "-servername", "localhost")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sClient{stdin: stdin, lines: make(chan string, 1024)}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	return s
}

// expect waits (bounded) for a line of output containing want; it fails on
// the process's end.
func (s *sClient) expect(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("openssl s_client ended before %q", want)
			}
			if testing.Verbose() {
				t.Log(l)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q from openssl s_client", want)
		}
	}
}

func (s *sClient) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// TestOpenSSLKeyUpdate: openssl s_client, in ChaCha20-Poly1305, sends a
// request, then a KeyUpdate (K: ours requested too, k: its own only); the
// connection is handed over, and its next request is served by Conn.
func TestOpenSSLKeyUpdate(t *testing.T) {
	for _, k := range []string{"K", "k", ""} {
		t.Run(tls.CipherSuiteName(suite)+"/"+k, func(t *testing.T) {
			netnstest.CheckLeaks(t)
			s := startTLSServer(t, "first")
			c := startSClient(t, s.addr, tls.CipherSuiteName(suite))
			c.send(t, "GET /one HTTP/1.1\nHost: localhost\n")
			c.expect(t, "first /one")
			s.mu.Lock()
			r, cc := s.recs[0], s.counts[0]
			s.mu.Unlock()
			if k != "" {
				read, written := cc.read.Load(), cc.written.Load()
				c.send(t, k)
				c.expect(t, "KEYUPDATE")
				// The Recorder has seen the KeyUpdate (and our answer).
				waitBytes(t, "KeyUpdate read", &cc.read, read)
				if k == "K" {
					waitBytes(t, "KeyUpdate written", &cc.written, written)
				}
			}
			if err := prove(r); err != nil {
				t.Fatalf("not proven: %v", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			raw, st, err := r.Take(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Suite != suite {
				t.Fatalf("suite %#04x, want %#04x", st.Suite, suite)
			}
			conn, err := tlsresume.New(raw, st)
			if err != nil {
				t.Fatal(err)
			}
			l := successor(t)
			l.conns <- conn
			c.send(t, "GET /two HTTP/1.1\nHost: localhost\n")
			c.expect(t, "successor /two")
			if k != "" {
				// And a KeyUpdate after the handover, answered by Conn.
				c.send(t, "K")
				c.expect(t, "KEYUPDATE")
				c.send(t, "GET /three HTTP/1.1\nHost: localhost\n")
				c.expect(t, "successor /three")
			}
			if n := s.handshakes.Load(); n != 1 {
				t.Fatalf("%d handshakes, want 1", n)
			}
		})
	}
}
