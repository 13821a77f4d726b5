package tlsresume

import (
	"crypto/cipher"
	"crypto/tls"
	"errors"
	"testing"

	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// The ChaCha20-Poly1305 cases of the record layer, the Recorder and the
// OpenSSL tests run in the module github.com/zerodrop/zerodrop/tlsresume/chacha
// (this module does not require x/crypto); here, a process that registered
// no AEAD refuses the suite.

// serverHello is a ServerHello record (session id of 32 bytes) naming suite.
func serverHello(suite uint16) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 32)
	body = append(body, make([]byte, 32)...) // legacy_session_id
	body = append(body, byte(suite>>8), byte(suite), 0, 0, 0)
	msg := append([]byte{2, 0, byte(len(body) >> 8), byte(len(body))}, body...)
	return append([]byte{typeHandshake, 3, 3, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// TestChaChaNotRegistered: without RegisterChaCha20Poly1305, New refuses a
// ChaCha20-Poly1305 State with an *UnsupportedSuiteError (and zeroes it),
// and a Recorder whose ServerHello names the suite is refused with one;
// the same connection with an AES suite is proven.
func TestChaChaNotRegistered(t *testing.T) {
	if chacha.Load() != nil {
		t.Fatal("ChaCha20-Poly1305 registered in this module's tests")
	}
	_, st := states(t, tls.TLS_AES_128_GCM_SHA256, 0)
	st.Suite = tls.TLS_CHACHA20_POLY1305_SHA256
	a, _ := tlstest.TCPPair(t)
	_, err := New(a, st)
	var ue *UnsupportedSuiteError
	if !errors.As(err, &ue) || ue.Suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("New: %v, want an *UnsupportedSuiteError for ChaCha20-Poly1305", err)
	}
	if st.ReadSecret != nil || st.WriteSecret != nil {
		t.Fatal("New left the secrets in the refused State")
	}

	for _, tc := range []struct {
		suite  uint16
		proven bool
	}{
		{tls.TLS_CHACHA20_POLY1305_SHA256, false},
		{tls.TLS_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, true}, // not a TLS 1.3 suite: left to the trial
	} {
		t.Run(tls.CipherSuiteName(tc.suite), func(t *testing.T) {
			s := newSynthetic(t)
			if _, err := s.rec.Write(serverHello(tc.suite)); err != nil {
				t.Fatal(err)
			}
			s.write(t, func(c *Conn) { c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")) })
			err := s.prove()
			if tc.proven {
				if err != nil {
					t.Fatalf("ProveIdleHTTP: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrNotProven) || !errors.As(err, &ue) || ue.Suite != tc.suite {
				t.Fatalf("ProveIdleHTTP: %v, want ErrNotProven with an *UnsupportedSuiteError", err)
			}
		})
	}
}

// TestRegisterChecks: a constructor that is not ChaCha20-Poly1305 is
// refused (ErrBadAEAD) and registers nothing.
func TestRegisterChecks(t *testing.T) {
	for name, f := range map[string]func([]byte) (cipher.AEAD, error){
		"nil":    nil,
		"aesgcm": newGCM,
		"error":  func([]byte) (cipher.AEAD, error) { return nil, errors.New("no") },
	} {
		if err := RegisterChaCha20Poly1305(f); !errors.Is(err, ErrBadAEAD) {
			t.Errorf("%s: %v, want ErrBadAEAD", name, err)
		}
	}
	if chacha.Load() != nil {
		t.Fatal("a refused constructor was registered")
	}
}
