package drain_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// A drain with HandOver and 64 idle keep-alive connections takes them from
// net/http a few at a time, and serves the others meanwhile: no HandOver
// call gets more than 16 connections, and while the first call holds its
// batch (in transit), a request on a connection outside it is answered by A
// at once. (All 64 went in one call, each in transit for the whole handoff,
// and the request waited for it.) Every connection ends up with B, which
// answers each client's next request on the same connection.
func TestHandOverSmallBatches(t *testing.T) {
	const clients, batch = 64, 16
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ln := listenTCP(t, "127.0.0.1:0")
		b := &drain.Server{HTTP: &http.Server{Handler: echoNamed("B")}}
		cs := make([]*rawClient, clients)
		byLocal := map[string]*rawClient{}
		var mu sync.Mutex
		var sizes []int
		var outside string // the answer a connection outside the first batch got during it
		a := &drain.Server{HTTP: &http.Server{Handler: echoNamed("A")}}
		a.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
			if conns == nil {
				return 0, nil
			}
			mu.Lock()
			sizes = append(sizes, len(conns))
			first := len(sizes) == 1
			mu.Unlock()
			if first {
				in := map[*rawClient]bool{}
				for _, d := range conns {
					in[byLocal[d.Conn.RemoteAddr().String()]] = true
				}
				for _, c := range cs {
					if !in[c] {
						outside, _ = c.post("outside")
						break
					}
				}
			}
			for _, d := range conns {
				if err := b.ServeConn(d.Conn, d.Unread); err != nil {
					return 0, err
				}
			}
			return len(conns), nil
		}
		served := serve(t, func() error { return a.Serve(ln) })
		for i := range cs {
			cs[i] = dialRaw(t, ln.Addr().String())
			byLocal[cs[i].c.LocalAddr().String()] = cs[i]
			if got, err := cs[i].post(fmt.Sprint(i)); err != nil || got != "A "+fmt.Sprint(i) {
				t.Fatalf("client %d: %q, %v", i, got, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rep, err := a.Shutdown(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := served(); err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
		mu.Lock()
		t.Logf("HandOver batches %v; a connection outside the first batch got %q during it", sizes, outside)
		for _, n := range sizes {
			if n > batch {
				t.Errorf("a HandOver call got %d connections, want at most %d: every connection of a batch is in transit until the whole batch is served again", n, batch)
			}
		}
		mu.Unlock()
		if outside != "A outside" {
			t.Errorf("a request on a connection outside the first batch, sent during it, got %q; want A's answer (A serves it until its own batch)", outside)
		}
		if h := rep.HTTP; h.HandedOver != clients || h.IdleClosed != 0 {
			t.Errorf("handed over %d, idle closed %d; want %d, 0", h.HandedOver, h.IdleClosed, clients)
		}
		for i, c := range cs {
			if got, err := c.post("after"); err != nil || got != "B after" {
				t.Errorf("client %d after the drain: %q, %v; want B's answer on the same connection", i, got, err)
			}
			c.c.Close()
		}
		b.Shutdown(ctx)
	})
}

// rawClient is one keep-alive connection posting by hand.
type rawClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReader(c)}
}

// post sends body and returns the answer's body.
func (r *rawClient) post(body string) (string, error) {
	r.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(r.c, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&sb)
	return sb.String(), err
}

// The handover begins as the listener begins to stop, not once it has
// stopped: with the listener's stop held (as a step-out's group inspection
// and RCU wait hold it for tens of milliseconds), the idle connections are
// handed over meanwhile. (HandOver was first called after the stop; the
// held stop waited its whole 5 s for a handover that could not come.)
func TestHandOverDuringStop(t *testing.T) {
	const clients = 8
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ln := listenTCP(t, "127.0.0.1:0")
		b := &drain.Server{HTTP: &http.Server{Handler: echoNamed("B")}}
		handed := make(chan struct{})
		var once sync.Once
		a := &drain.Server{HTTP: &http.Server{Handler: echoNamed("A")}}
		a.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
			for _, d := range conns {
				if err := b.ServeConn(d.Conn, d.Unread); err != nil {
					return 0, err
				}
			}
			if len(conns) > 0 {
				once.Do(func() { close(handed) })
			}
			return len(conns), nil
		}
		var during bool
		defer drain.SetTestHookStopListener(func() {
			select {
			case <-handed:
				during = true
			case <-time.After(5 * time.Second):
			}
		})()
		served := serve(t, func() error { return a.Serve(ln) })
		cs := make([]*rawClient, clients)
		for i := range cs {
			cs[i] = dialRaw(t, ln.Addr().String())
			if got, err := cs[i].post("x"); err != nil || got != "A x" {
				t.Fatalf("client %d: %q, %v", i, got, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rep, err := a.Shutdown(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := served(); err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
		if !during {
			t.Error("nothing was handed over while the listener's stop was held: the handover waited for the stop")
		}
		if h := rep.HTTP; h.HandedOver != clients || h.IdleClosed != 0 {
			t.Errorf("handed over %d, idle closed %d; want %d, 0", h.HandedOver, h.IdleClosed, clients)
		}
		for i, c := range cs {
			if got, err := c.post("after"); err != nil || got != "B after" {
				t.Errorf("client %d after the drain: %q, %v", i, got, err)
			}
			c.c.Close()
		}
		b.Shutdown(ctx)
	})
}
