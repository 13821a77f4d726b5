package quicdrain

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestHTTP3Shutdown runs two generations in this process: a client POSTs
// back to back to the first; the first shuts down (Handover, GOAWAY with a
// request in flight) while the second starts; every request is answered,
// the later ones by the second; the report says 1 connection told and
// finished, none forced; goroutines and fds are back once both closed.
func TestHTTP3Shutdown(t *testing.T) {
	noLeaks(t, func() {
		cert := netnstest.NewCert(t)
		p := newPair(t, Config{})
		serve := func(g *Gen) *HTTP3 {
			srv := &http3.Server{
				TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert.TLS}}),
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					fmt.Fprintf(w, "%d", g.Generation())
				}),
			}
			h, err := ServeHTTP3(g, srv)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		h1, h2 := serve(p.old), serve(p.new)
		tr := &http3.Transport{TLSClientConfig: cert.Client(http3.NextProtoH3), QUICConfig: &quic.Config{MaxIdleTimeout: 10 * time.Second}}
		defer tr.Close()
		url := "https://" + p.addr.String() + "/"
		byGen := map[string]int{}
		post := func() {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte("hello")))
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatalf("request %d: %v", len(byGen), err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			byGen[strings.TrimSpace(string(b))]++
		}
		for range 20 {
			post()
		}
		repc := make(chan Report, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		go func() { repc <- h1.Shutdown(ctx) }()
		if err := p.new.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var rep Report
		for done := false; !done; {
			post()
			select {
			case rep = <-repc:
				done = true
			default:
			}
		}
		for range 20 {
			post()
		}
		if byGen["7"] < 20 || byGen["8"] < 20 {
			t.Errorf("answers by generation %v", byGen)
		}
		if rep.HandoverError != nil || rep.Told != 1 || rep.Finished != 1 || rep.Forced != 0 || rep.Handshakes != 0 {
			t.Errorf("report %+v: want 1 connection told and finished, none forced", rep)
		}
		if st := p.new.Stats(); st.HandedOver != 1 || st.Dropped() != 0 {
			t.Errorf("new generation: %+v; want the one handshake handed over, nothing dropped", st)
		}
		rep2 := h2.Shutdown(ctx) // no successor: the handover fails
		if !errors.Is(rep2.HandoverError, ErrNoSuccessor) || rep2.Told != 1 || rep2.Forced != 0 || rep2.Took > 5*time.Second {
			t.Errorf("last generation's report %+v: want ErrNoSuccessor, 1 told, 0 forced, within 5 s (it reads until it closes)", rep2)
		}
		t.Logf("answers %v; report %+v; last %+v", byGen, rep, rep2)
	})
}
