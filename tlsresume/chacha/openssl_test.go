package chacha_test

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/tlsresume"
	"github.com/zerodrop/zerodrop/tlsresume/internal/tlstest"
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

// countedServer is a tlstest.Server whose sockets are counted (countConn)
// under their Recorders.
type countedServer struct {
	*tlstest.Server[*tlsresume.Recorder]
	mu     sync.Mutex
	counts []*countConn
}

func startTLSServer(t *testing.T, name string) *countedServer {
	t.Helper()
	var capture tlsresume.Capture
	s := &countedServer{}
	s.Server = tlstest.StartServer(t, name, capture.Config, func(c net.Conn) *tlsresume.Recorder {
		cc := &countConn{Conn: c}
		s.mu.Lock()
		s.counts = append(s.counts, cc)
		s.mu.Unlock()
		return capture.Wrap(cc)
	})
	return s
}

// count returns the countConn of the i-th connection accepted.
func (s *countedServer) count(t *testing.T, i int) *countConn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.counts) {
		t.Fatalf("connection %d asked for, %d accepted", i, len(s.counts))
	}
	return s.counts[i]
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

// TestOpenSSLKeyUpdate: openssl s_client, in ChaCha20-Poly1305, sends a
// request, then a KeyUpdate (K: ours requested too, k: its own only); the
// connection is handed over, and its next request is served by Conn.
func TestOpenSSLKeyUpdate(t *testing.T) {
	for _, k := range []string{"K", "k", ""} {
		t.Run(tls.CipherSuiteName(suite)+"/"+k, func(t *testing.T) {
			netnstest.CheckLeaks(t)
			s := startTLSServer(t, "first")
			c := tlstest.StartSClient(t, s.Addr, tls.CipherSuiteName(suite))
			c.Send(t, "GET /one HTTP/1.1\nHost: localhost\n")
			c.Expect(t, "first /one")
			r, cc := s.Rec(t, 0), s.count(t, 0)
			if k != "" {
				read, written := cc.read.Load(), cc.written.Load()
				c.Send(t, k)
				c.Expect(t, "KEYUPDATE")
				// The Recorder has seen the KeyUpdate (and our answer).
				waitBytes(t, "KeyUpdate read", &cc.read, read)
				if k == "K" {
					waitBytes(t, "KeyUpdate written", &cc.written, written)
				}
			}
			if err := tlstest.Retry(r.ProveIdleHTTP); err != nil {
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
			tlstest.Successor(t) <- conn
			c.Send(t, "GET /two HTTP/1.1\nHost: localhost\n")
			c.Expect(t, "successor /two")
			if k != "" {
				// And a KeyUpdate after the handover, answered by Conn.
				c.Send(t, "K")
				c.Expect(t, "KEYUPDATE")
				c.Send(t, "GET /three HTTP/1.1\nHost: localhost\n")
				c.Expect(t, "successor /three")
			}
			if n := s.Handshakes.Load(); n != 1 {
				t.Fatalf("%d handshakes, want 1", n)
			}
		})
	}
}
