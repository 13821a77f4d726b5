package chacha_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// TestDrainHandOver: with this package imported, drain.Server.TLSHandOver
// hands an idle openssl s_client session in ChaCha20-Poly1305 over with its
// session: A's report counts it handed over, and B answers the next request
// on it, without a handshake. (Without the import: drain's
// TestTLSHandOverChaChaRefused.)
func TestDrainHandOver(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		cert := netnstest.NewCert(t)
		var lc net.ListenConfig
		lc.SetMultipathTCP(false) // drain hands over plain TCP connections only
		ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		named := func(name string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "%s %s suite=%s\n", name, r.URL.Path, tls.CipherSuiteName(r.TLS.CipherSuite))
			})
		}
		b := &drain.Server{HTTP: &http.Server{Handler: named("B")}}
		var handshakes atomic.Int32
		a := &drain.Server{
			HTTP: &http.Server{Handler: named("A"), TLSConfig: &tls.Config{
				Certificates: []tls.Certificate{cert.TLS},
				VerifyConnection: func(tls.ConnectionState) error {
					handshakes.Add(1)
					return nil
				},
			}},
			TLSHandOver: true,
			HandOver: func(ctx context.Context, conns []drain.Detached) (int, error) {
				for _, d := range conns {
					if err := b.ServeConn(d.Conn, d.Unread); err != nil {
						return 0, err
					}
				}
				return len(conns), nil
			},
		}
		served := make(chan error, 1)
		go func() { served <- a.ServeTLS(ln, "", "") }()
		c := tlstest.StartSClient(t, ln.Addr().String(), tls.CipherSuiteName(suite))
		c.Send(t, "GET /one HTTP/1.1\nHost: localhost\n")
		c.Expect(t, "A /one suite=TLS_CHACHA20_POLY1305_SHA256")

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rep, err := a.Shutdown(ctx)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-served:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("Serve did not return")
		}
		if h := rep.HTTP; h.HandedOverTLS != 1 || h.TLSNotHandedOver != 0 {
			t.Fatalf("report: TLS handed over %d, not handed over %d; want 1, 0", h.HandedOverTLS, h.TLSNotHandedOver)
		}
		c.Send(t, "GET /two HTTP/1.1\nHost: localhost\n")
		c.Expect(t, "B /two suite=TLS_CHACHA20_POLY1305_SHA256")
		if n := handshakes.Load(); n != 1 {
			t.Fatalf("%d handshakes, want 1", n)
		}
		if _, err := b.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
