package drain

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// pair is server A, whose connections can be taken, and server B, which
// serves the taken ones as if it had accepted them. Both echo the request's
// method, path and body, naming themselves.
type pair struct {
	addr   string
	mu     sync.Mutex
	conns  []*detachConn // A's, in accept order
	served map[string][]string
	b      *connListener
	wg     sync.WaitGroup
}

func newPair(t *testing.T) *pair {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{addr: ln.Addr().String(), served: map[string][]string{}, b: newConnListener(ln.Addr())}
	echo := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			line := fmt.Sprintf("%s %s %s", r.Method, r.URL.Path, body)
			p.mu.Lock()
			p.served[name] = append(p.served[name], line)
			p.mu.Unlock()
			fmt.Fprintf(w, "%s: %s", name, line)
		})
	}
	a := &http.Server{Handler: echo("A"), ConnState: func(c net.Conn, s http.ConnState) {
		dc := c.(*detachConn)
		dc.state(s)
		if s == http.StateNew {
			p.mu.Lock()
			p.conns = append(p.conns, dc)
			p.mu.Unlock()
		}
	}}
	b := &http.Server{Handler: echo("B")}
	for _, f := range []func(){func() { a.Serve(detachListener{ln}) }, func() { b.Serve(p.b) }} {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); f() }()
	}
	t.Cleanup(func() {
		a.Close()
		b.Close()
		p.wg.Wait()
	})
	return p
}

func (p *pair) conn(t *testing.T, i int) *detachConn {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		p.mu.Lock()
		n := len(p.conns)
		p.mu.Unlock()
		if n > i {
			return p.conns[i]
		}
	}
	t.Fatalf("connection %d never accepted", i)
	return nil
}

// take detaches dc once it is takeable (10 s at most) and serves it in B.
func (p *pair) take(t *testing.T, dc *detachConn) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tc, unread, ok, err := dc.detach(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			go func() {
				if !p.b.serve(newDetachConn(tc, unread)) {
					tc.Close()
				}
			}()
			return
		}
	}
	t.Fatal("connection never takeable")
}

func (p *pair) servedBy(name string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.served[name]...)
}

func post(body string) string {
	return fmt.Sprintf("POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

func readReply(t *testing.T, br *bufio.Reader, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDetachExactlyOnce takes idle connections from one http.Server and
// serves them in another without losing or duplicating a byte: a connection
// quiet during the take; a request whose first half arrives during the take
// and second half after; pipelined requests (never taken while net/http holds
// buffered bytes); a client that closes during the take. No fd or goroutine
// is left.
func TestDetachExactlyOnce(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		p := newPair(t)
		dialN := func(i int) (net.Conn, *bufio.Reader, *detachConn) {
			c, err := net.Dial("tcp4", p.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			io.WriteString(c, post(fmt.Sprint("first", i)))
			br := bufio.NewReader(c)
			if got, want := readReply(t, br, c), fmt.Sprintf("A: POST /p first%d", i); got != want {
				t.Fatalf("first reply %q, want %q", got, want)
			}
			return c, br, p.conn(t, i)
		}

		// Quiet during the take.
		c, br, dc := dialN(0)
		p.take(t, dc)
		io.WriteString(c, post("after"))
		if got := readReply(t, br, c); got != "B: POST /p after" {
			t.Errorf("quiet: %q, want B's answer", got)
		}

		// Half of a request during the take, the rest after.
		c, br, dc = dialN(1)
		req := post("split-body")
		dc.beforeWake = func() {
			io.WriteString(c, req[:len(req)/2])
			time.Sleep(20 * time.Millisecond) // the bytes arrive before the wake, mostly
		}
		p.take(t, dc)
		io.WriteString(c, req[len(req)/2:])
		if got := readReply(t, br, c); got != "B: POST /p split-body" {
			t.Errorf("split: %q, want B's answer", got)
		}

		// Pipelined: the second request's first line is buffered by A with
		// the first request; A may not be robbed of it.
		c, err := net.Dial("tcp4", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		second := post("second")
		line := strings.Index(second, "\r\n") + 2
		io.WriteString(c, post("one")+second[:line])
		br = bufio.NewReader(c)
		if got := readReply(t, br, c); got != "A: POST /p one" {
			t.Fatalf("pipelined first: %q", got)
		}
		dc = p.conn(t, 2)
		for range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, _, ok, err := dc.detach(ctx)
			cancel()
			if ok || err != nil {
				t.Fatalf("taken with a request half read: %v, %v", ok, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		io.WriteString(c, second[line:])
		if got := readReply(t, br, c); got != "A: POST /p second" {
			t.Errorf("pipelined second: %q, want A's answer", got)
		}
		p.take(t, dc) // idle again, with nothing buffered
		io.WriteString(c, post("third"))
		if got := readReply(t, br, c); got != "B: POST /p third" {
			t.Errorf("pipelined third: %q, want B's answer", got)
		}

		// The client closes during the take.
		c, _, dc = dialN(3)
		dc.beforeWake = func() { c.Close() }
		p.take(t, dc)

		a, b := p.servedBy("A"), p.servedBy("B")
		wantA := []string{"POST /p first0", "POST /p first1", "POST /p one", "POST /p second", "POST /p first3"}
		wantB := []string{"POST /p after", "POST /p split-body", "POST /p third"}
		if strings.Join(a, "|") != strings.Join(wantA, "|") || strings.Join(b, "|") != strings.Join(wantB, "|") {
			t.Errorf("A served %q, B %q; want %q and %q, each once", a, b, wantA, wantB)
		}
	})
}
