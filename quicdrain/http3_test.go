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
		h1, h2 := serveGen(t, cert, p.old), serveGen(t, cert, p.new)
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

// serveGen serves HTTP/3 on g with cert: each answer is g's generation.
func serveGen(t *testing.T, cert *netnstest.Cert, g *Gen) *HTTP3 {
	t.Helper()
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

// A connection that has carried no request yet is not told to go away
// while idle early in the drain: quic-go's client dials a connection for a
// request (and for the one retry it makes of a rejected request), so its
// client is most likely about to send that request, and one refused there
// fails. Here the client completes its handshake with the first
// generation, which then shuts down with grace (20 s); the client sends
// its first request NewConnQuiet + 1 s later, on that connection: it is
// answered by the first generation, which told the connection to go away
// with it. (The restart test beside a CPU hog lost such a request: a
// rejected request's retry, on the connection dialled for it, whose
// client took more than NewConnQuiet to send it.) With a grace of 3 s and
// no request, the connection is told while idle halfway, and its client
// leaves before the end: none is forced.
func TestFirstRequestLate(t *testing.T) {
	for _, c := range []struct {
		grace time.Duration
		post  bool
	}{{20 * time.Second, true}, {3 * time.Second, false}} {
		t.Run(fmt.Sprintf("grace %v, request %v", c.grace, c.post), func(t *testing.T) {
			noLeaks(t, func() {
				cert := netnstest.NewCert(t)
				p := newPair(t, Config{})
				h1, h2 := serveGen(t, cert, p.old), serveGen(t, cert, p.new)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				conn, err := quic.DialAddr(ctx, p.addr.String(), cert.Client(http3.NextProtoH3), &quic.Config{MaxIdleTimeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer conn.CloseWithError(0, "")
				cc := (&http3.Transport{}).NewClientConn(conn)
				gctx, gcancel := context.WithTimeout(ctx, c.grace)
				defer gcancel()
				repc := make(chan Report, 1)
				go func() { repc <- h1.Shutdown(gctx) }()
				if err := p.new.Start(ctx); err != nil {
					t.Fatal(err)
				}
				if c.post {
					time.Sleep(NewConnQuiet + time.Second)
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+p.addr.String()+"/", bytes.NewReader([]byte("hello")))
					resp, err := cc.RoundTrip(req)
					if err != nil {
						t.Fatalf("first request, %v after the drain began: %v", NewConnQuiet+time.Second, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(b) != "7" {
						t.Errorf("answered %q, want 7 (the first generation's)", b)
					}
				}
				if rep := <-repc; rep.Told != 1 || rep.Finished != 1 || rep.Forced != 0 {
					t.Errorf("report %+v: want 1 connection told and finished, none forced", rep)
				}
				h2.Shutdown(ctx)
			})
		})
	}
}
