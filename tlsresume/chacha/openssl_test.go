package chacha_test

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
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

// countedRecorder is a Recorder with the byte counts of the socket under
// it.
type countedRecorder struct {
	*tlsresume.Recorder
	counts *countConn
}

// startTLSServer starts an HTTPS server answering "name path" whose
// connections run over countedRecorders of one Capture.
func startTLSServer(t *testing.T, name string) *tlstest.Server[countedRecorder] {
	t.Helper()
	var capture tlsresume.Capture
	return tlstest.StartServer(t, name, capture.Config, func(c net.Conn) countedRecorder {
		cc := &countConn{Conn: c}
		return countedRecorder{capture.Wrap(cc), cc}
	})
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
			c.Get(t, "first", "/one")
			r := s.Rec(t, 0)
			cc := r.counts
			if k != "" {
				read, written := cc.read.Load(), cc.written.Load()
				c.KeyUpdate(t, k)
				// The Recorder has seen the KeyUpdate (and our answer).
				waitBytes(t, "KeyUpdate read", &cc.read, read)
				if k == "K" {
					waitBytes(t, "KeyUpdate written", &cc.written, written)
				}
			}
			raw, st := tlstest.Take(t, r)
			if st.Suite != suite {
				t.Fatalf("suite %#04x, want %#04x", st.Suite, suite)
			}
			conn, err := tlsresume.New(raw, st)
			if err != nil {
				t.Fatal(err)
			}
			tlstest.Successor(t) <- conn
			c.Get(t, "successor", "/two")
			if k != "" {
				// And a KeyUpdate after the handover, answered by Conn.
				c.KeyUpdate(t, "K")
				c.Get(t, "successor", "/three")
			}
			if n := s.Handshakes.Load(); n != 1 {
				t.Fatalf("%d handshakes, want 1", n)
			}
		})
	}
}
