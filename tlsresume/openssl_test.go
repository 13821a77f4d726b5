package tlsresume

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// TestOpenSSLKeyUpdate: openssl s_client, in each TLS 1.3 suite, sends a
// request, then a KeyUpdate (K: ours requested too, k: its own only); the
// connection is handed over, and its next request is served by Conn.
// (ChaCha20-Poly1305: in the tlsresume/chacha module.)
func TestOpenSSLKeyUpdate(t *testing.T) {
	for _, suite := range allSuites {
		for _, k := range []string{"K", "k", ""} {
			t.Run(tls.CipherSuiteName(suite)+"/"+k, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				s := startTLSServer(t, "first")
				c := tlstest.StartSClient(t, s.Addr, tls.CipherSuiteName(suite))
				c.Get(t, "first", "/one")
				r := s.Rec(t, 0)
				if k != "" {
					c.KeyUpdate(t, k)
					waitUpdated(t, r, k == "K")
				}
				raw, st := tlstest.Take(t, r)
				if st.Suite != suite {
					t.Fatalf("suite %#04x, want %#04x", st.Suite, suite)
				}
				conn, err := New(raw, st)
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
}

// waitUpdated waits (bounded) until r followed the peer's KeyUpdate (and,
// if requested, our answer).
func waitUpdated(t *testing.T, r *Recorder, both bool) {
	t.Helper()
	for i := 0; i < 400; i++ {
		r.mu.Lock()
		done := r.in.lastPrev && (!both || r.out.lastPrev)
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the KeyUpdate was not followed")
}

// TestOpenSSLChaChaRefused: an openssl s_client session in
// ChaCha20-Poly1305, with no AEAD registered, is not proven (an
// *UnsupportedSuiteError) and goes on being served by crypto/tls.
func TestOpenSSLChaChaRefused(t *testing.T) {
	netnstest.CheckLeaks(t)
	s := startTLSServer(t, "first")
	c := tlstest.StartSClient(t, s.Addr, tls.CipherSuiteName(tls.TLS_CHACHA20_POLY1305_SHA256))
	c.Get(t, "first", "/one")
	r := s.Rec(t, 0)
	err := prove(r)
	var ue *UnsupportedSuiteError
	if !errors.Is(err, ErrNotProven) || !errors.As(err, &ue) || ue.Suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("ProveIdleHTTP: %v, want ErrNotProven with an *UnsupportedSuiteError", err)
	}
	c.Get(t, "first", "/two")
}
