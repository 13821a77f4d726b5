package drain_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// lineNamed is tlsNamed with a newline, for openssl s_client's output.
func lineNamed(name string) http.Handler {
	h := tlsNamed(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		io.WriteString(w, "\n")
	})
}

// TestTLSHandOverChaChaRefused: with TLSHandOver, an idle openssl s_client
// session in TLS_CHACHA20_POLY1305_SHA256 is not handed over in a program
// that did not import tlsresume/chacha (this module's tests cannot): A's
// report counts it as not handed over, and it is closed idle as without the
// option. The control, the same client in TLS_AES_128_GCM_SHA256, is handed
// over and answered by B. (Handed over in ChaCha20-Poly1305: the
// tlsresume/chacha module's TestOpenSSLKeyUpdate.)
func TestTLSHandOverChaChaRefused(t *testing.T) {
	for _, tc := range []struct {
		suite  uint16
		handed bool
	}{
		{tls.TLS_AES_128_GCM_SHA256, true},
		{tls.TLS_CHACHA20_POLY1305_SHA256, false},
	} {
		t.Run(tls.CipherSuiteName(tc.suite), func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				cert := netnstest.NewCert(t)
				ln := listenTCP(t, "127.0.0.1:0")
				b := &drain.Server{HTTP: &http.Server{Handler: lineNamed("B")}}
				a := &drain.Server{
					HTTP: &http.Server{Handler: lineNamed("A"), TLSConfig: &tls.Config{
						Certificates: []tls.Certificate{cert.TLS},
					}},
					TLSHandOver: true,
					HandOver:    passTo(b),
				}
				served := serve(t, func() error { return a.ServeTLS(ln, "", "") })
				c := tlstest.StartSClient(t, ln.Addr().String(), tls.CipherSuiteName(tc.suite))
				c.Send(t, "GET /one HTTP/1.1\nHost: localhost\n")
				c.Expect(t, "A /one tls=true")

				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				rep, err := a.Shutdown(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := served(); !errors.Is(err, http.ErrServerClosed) {
					t.Fatalf("Serve: %v", err)
				}
				h := rep.HTTP
				if tc.handed {
					if h.HandedOverTLS != 1 || h.TLSNotHandedOver != 0 {
						t.Fatalf("report: TLS handed over %d, not handed over %d; want 1, 0", h.HandedOverTLS, h.TLSNotHandedOver)
					}
					c.Send(t, "GET /two HTTP/1.1\nHost: localhost\n")
					c.Expect(t, "B /two tls=true")
					c.CloseInput()
					c.Expect(t, "")
				} else {
					if h.HandedOverTLS != 0 || h.TLSNotHandedOver != 1 || h.IdleClosedTLS != 1 {
						t.Fatalf("report: TLS handed over %d, not handed over %d, idle closed TLS %d; want 0, 1, 1",
							h.HandedOverTLS, h.TLSNotHandedOver, h.IdleClosedTLS)
					}
					c.Expect(t, "") // closed by A
				}
				if _, err := b.Shutdown(ctx); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
