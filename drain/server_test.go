package drain_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// waitDraining waits until the readiness handler answers 503.
func waitDraining(t *testing.T, ds *drain.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for readiness(ds) != http.StatusServiceUnavailable {
		if time.Now().After(deadline) {
			t.Fatal("readiness never failed")
		}
		time.Sleep(time.Millisecond)
	}
}

func readiness(ds *drain.Server) int {
	rec := httptest.NewRecorder()
	ds.Ready().ServeHTTP(rec, httptest.NewRequest("GET", "/ready", nil))
	return rec.Code
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// phase is one drain.Server on a fresh listener with a handler under test.
type phase struct {
	ds      *drain.Server
	addr    string
	wait    func() error
	entered chan string   // the handler says it runs
	release chan struct{} // closed by the test to let it finish
}

func newPhase(t *testing.T, extra func(p *phase, mux *http.ServeMux)) *phase {
	t.Helper()
	tl := listenTCP(t, "127.0.0.1:0")
	p := &phase{addr: tl.Addr().String(), entered: make(chan string, 4), release: make(chan struct{})}
	t.Cleanup(func() {
		select {
		case <-p.release:
		default:
			close(p.release)
		}
	})
	mux := http.NewServeMux()
	mux.Handle("/", named("A"))
	mux.HandleFunc("/block", func(w http.ResponseWriter, r *http.Request) {
		p.entered <- r.URL.Path
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "done\n")
	})
	if extra != nil {
		extra(p, mux)
	}
	// The tracker records a state before the user's ConnState runs, so a
	// StateClosed seen here means the tracker has forgotten the connection.
	closed := make(chan struct{}, 1)
	p.ds = &drain.Server{HTTP: &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}}}
	p.wait = serve(t, func() error { return p.ds.Serve(tl) })
	// Serve has begun once a request is answered (a Serve that starts after
	// Shutdown returns http.ErrServerClosed, like net/http's).
	c := dial(t, p.addr)
	c.Write(request("/"))
	if _, _, err := readResponse(c, 10*time.Second); err != nil {
		t.Fatalf("server not serving: %v", err)
	}
	c.Close()
	// The warm-up connection must be gone on the server's side too, or a
	// drain that begins now counts it as in flight.
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("warm-up connection not closed by the server")
	}
	return p
}

func (p *phase) awaitHandler(t *testing.T) {
	t.Helper()
	select {
	case <-p.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("handler not entered")
	}
}

// shutdown runs Shutdown in the background.
func (p *phase) shutdown(ctx context.Context) <-chan result {
	out := make(chan result, 1)
	go func() {
		rep, err := p.ds.Shutdown(ctx)
		out <- result{rep, err}
	}()
	return out
}

type result struct {
	rep *drain.Report
	err error
}

func keepAliveRequest(path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n")
}

// TestSlowRequestCompletes: a request in flight when the drain begins gets
// its full response (with Connection: close) and is counted.
func TestSlowRequestCompletes(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		p := newPhase(t, nil)
		core, logs := observer.New(zap.InfoLevel)
		p.ds.Logger = zap.New(core)
		c := dial(t, p.addr)
		c.Write(keepAliveRequest("/block"))
		p.awaitHandler(t)
		res := p.shutdown(context.Background())
		waitDraining(t, p.ds)
		close(p.release)
		resp, body, err := readResponse(c, 5*time.Second)
		if err != nil || resp.StatusCode != 200 || body != "done\n" {
			t.Fatalf("slow request: %v %v %q", resp, err, body)
		}
		r := <-res
		if r.err != nil || r.rep.HTTP.InFlightAtStart != 1 || r.rep.HTTP.Completed != 1 || len(r.rep.HTTP.Forced) != 0 {
			t.Errorf("report %+v, err %v; want 1 in flight, 1 completed, none forced", r.rep.HTTP, r.err)
		}
		// Logged once; JSON has the listener and the HTTP figures.
		if all := logs.All(); len(all) != 1 || all[0].Message != "drained" || all[0].ContextMap()["completed"] != int64(1) {
			t.Errorf("log entries %+v, want one \"drained\" with completed=1", all)
		}
		b, err := json.Marshal(r.rep)
		var back map[string]any
		if err == nil {
			err = json.Unmarshal(b, &back)
		}
		if err != nil || back["method"] != "accept" || back["http"].(map[string]any)["completed"] != 1.0 {
			t.Errorf("JSON %s: %v", b, err)
		}
		p.wait()
	})
}

// TestIdleKeepAliveClosed: an idle keep-alive connection is closed as soon as
// the drain begins, while another request is still in flight.
func TestIdleKeepAliveClosed(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		p := newPhase(t, nil)
		idle := dial(t, p.addr)
		idle.Write(keepAliveRequest("/"))
		if resp, _, err := readResponse(idle, 5*time.Second); err != nil || resp.Close {
			t.Fatalf("first request: %v, %v", resp, err)
		}
		busy := dial(t, p.addr)
		busy.Write(request("/block"))
		p.awaitHandler(t)
		res := p.shutdown(context.Background())
		idle.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := idle.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("idle connection: read %d, %v; want EOF while the other request runs", n, err)
		}
		close(p.release)
		if _, _, err := readResponse(busy, 5*time.Second); err != nil {
			t.Error(err)
		}
		if r := <-res; r.err != nil || len(r.rep.HTTP.Forced) != 0 {
			t.Errorf("shutdown %v, forced %v", r.err, r.rep.HTTP.Forced)
		}
		p.wait()
	})
}

// TestSecondRequestDuringDrain: a keep-alive connection that sends its
// second request after the listener has stopped gets it answered once, with
// Connection: close, and the report counts a response on an old keep-alive
// connection. IdleGrace is long so the test does not race it on a loaded
// machine.
func TestSecondRequestDuringDrain(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		held := holdAfterStop(t)
		p := newPhase(t, nil)
		p.ds.IdleGrace = 5 * time.Second
		c := dial(t, p.addr)
		c.Write(keepAliveRequest("/"))
		if resp, _, err := readResponse(c, 5*time.Second); err != nil || resp.Close {
			t.Fatalf("first request: %v, %v", resp, err)
		}
		res := p.shutdown(context.Background())
		waitRefused(t, p.addr)
		c.Write(keepAliveRequest("/"))
		resp, body, err := readResponse(c, 5*time.Second)
		if err != nil || resp.StatusCode != 200 || body != "A\n" || !resp.Close {
			t.Fatalf("second request: %v %v %q, want 200 with Connection: close", resp, err, body)
		}
		held()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("after the second response: %d, %v; want EOF", n, err)
		}
		r := <-res
		if h := r.rep.HTTP; r.err != nil || h.KeepAliveResponses != 1 || h.Completed != 1 {
			t.Errorf("report %+v, err %v; want 1 keep-alive response, 1 completed", h, r.err)
		}
		p.wait()
	})
}

// holdAfterStop holds a Server's Shutdown once its listener's Stop has
// returned, until the returned func is called (or 10 s have passed), so that
// what a test sends once the listener refuses reaches the server while its
// Shutdown has not gone on from the stop: the moment a loaded machine could
// make it reach it anyway. The hook is removed at the test's end.
func holdAfterStop(t *testing.T) (release func()) {
	ch := make(chan struct{})
	release = sync.OnceFunc(func() { close(ch) })
	restore := drain.SetTestHookListenerStopped(func() {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
		}
	})
	t.Cleanup(func() { release(); restore() })
	return release
}

// waitRefused waits until the (lone) listener on addr has stopped.
func waitRefused(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			return
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting")
		}
	}
}

// TestDeadlineForcesClose: a request longer than the deadline is closed and
// named in the report.
func TestDeadlineForcesClose(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		p := newPhase(t, nil)
		c := dial(t, p.addr)
		c.Write(request("/block"))
		p.awaitHandler(t)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		r := <-p.shutdown(ctx)
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("shutdown: %v, want deadline exceeded", r.err)
		}
		h := r.rep.HTTP
		if len(h.Forced) != 1 || h.ForcedRequests != 1 || h.Forced[0].State != "active" || h.Forced[0].Remote != c.LocalAddr().String() {
			t.Errorf("forced %+v (%d requests), want our connection, active", h.Forced, h.ForcedRequests)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); netnstest.Classify(err) == netnstest.Timeout {
			t.Errorf("forced connection still open: %v", err)
		}
		p.wait()
	})
}

// TestHijackedCallback: a hijacked connection is handed to the callback,
// which closes it; nothing is forced.
func TestHijackedCallback(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		hijacked := make(chan struct{})
		p := newPhase(t, func(p *phase, mux *http.ServeMux) {
			mux.HandleFunc("/ws", func(w http.ResponseWriter, _ *http.Request) {
				conn, bw, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				bw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n")
				bw.Flush()
				close(hijacked)
				_ = conn // owned by the callback from now on
			})
		})
		var notified []string
		p.ds.Hijacked = func(c net.Conn) {
			notified = append(notified, c.RemoteAddr().String())
			c.Close()
		}
		c := dial(t, p.addr)
		c.Write(keepAliveRequest("/ws"))
		<-hijacked
		r := <-p.shutdown(context.Background())
		if r.err != nil || r.rep.HTTP.HijackedNotified != 1 || len(r.rep.HTTP.Forced) != 0 ||
			len(notified) != 1 || notified[0] != c.LocalAddr().String() {
			t.Errorf("err %v, report %+v, notified %v", r.err, r.rep.HTTP, notified)
		}
		resp, _, err := readResponse(c, 5*time.Second)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := io.Copy(io.Discard, c); n != 0 || err != nil {
			t.Errorf("hijacked connection: %d bytes, %v; want closed", n, err)
		}
		p.wait()
	})
}

// TestReadiness: 200 while serving; 503 once Shutdown began, while requests
// are still served during Delay.
func TestReadiness(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		p := newPhase(t, nil)
		p.ds.Delay = time.Second // long enough for a loaded machine to dial within it
		if code := readiness(p.ds); code != 200 {
			t.Fatalf("readiness %d before the drain", code)
		}
		res := p.shutdown(context.Background())
		waitDraining(t, p.ds)
		c := dial(t, p.addr)
		c.Write(request("/"))
		if resp, _, err := readResponse(c, 5*time.Second); err != nil || resp.StatusCode != 200 {
			t.Errorf("request during the delay: %v %v", resp, err)
		}
		r := <-res
		if r.err != nil || r.rep.HTTP.DelayTook < p.ds.Delay {
			t.Errorf("shutdown %v, delay took %v", r.err, r.rep.HTTP.DelayTook)
		}
		p.wait()
	})
}

// TestIdleConnGetsWindow: keep-alive connections idle for longer than
// IdleGrace when the drain begins are not closed at once: one that sends a
// request during the window is answered once, with Connection: close; one
// that sends nothing is closed at the window's end, and the report counts it
// in IdleClosed.
func TestIdleConnGetsWindow(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		const grace = 2 * time.Second
		held := holdAfterStop(t)
		p := newPhase(t, nil)
		p.ds.IdleGrace = grace
		busy, quiet := dial(t, p.addr), dial(t, p.addr)
		for _, c := range []net.Conn{busy, quiet} {
			c.Write(keepAliveRequest("/"))
			if resp, _, err := readResponse(c, 5*time.Second); err != nil || resp.Close {
				t.Fatalf("first request: %v, %v", resp, err)
			}
		}
		time.Sleep(grace + 100*time.Millisecond) // both idle for longer than IdleGrace
		res := p.shutdown(context.Background())
		waitRefused(t, p.addr)
		busy.Write(keepAliveRequest("/"))
		resp, body, err := readResponse(busy, 5*time.Second)
		if err != nil || resp.StatusCode != 200 || body != "A\n" || !resp.Close {
			t.Fatalf("request in the window: %v %v %q, want 200 with Connection: close", resp, err, body)
		}
		held()
		quiet.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := quiet.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
			t.Errorf("quiet connection: %d, %v; want EOF at the window's end", n, err)
		}
		r := <-res
		if h := r.rep.HTTP; r.err != nil || h.IdleClosed != 1 || h.KeepAliveResponses != 1 {
			t.Errorf("report %+v, err %v; want 1 idle closed, 1 keep-alive response", h, r.err)
		}
		p.wait()
	})
}

// TestShutdownRightAfterServe: a Serve started in a goroutine and shut down
// at once, as zerodrop.Serve does when its Ready fails. Waiting for Serving
// makes the drain take the listener: it reports its method, and a
// connection queued before is served. zerodrop.Serve shut down without
// waiting; when the Serve goroutine had not taken the listener yet, the
// report had no method (TestServeUnreadySuccessor failed so in CI) and
// Listener.Close drained the socket with no Accept left to take its queue.
func TestShutdownRightAfterServe(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l := listenTCP(t, "127.0.0.1:0")
		c := dial(t, l.Addr().String()) // queued before Serve
		c.Write(request("/"))
		ds := &drain.Server{HTTP: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) })}}
		served := make(chan error, 1)
		go func() { served <- ds.Serve(l) }()
		select {
		case <-ds.Serving():
		case <-time.After(30 * time.Second):
			t.Fatal("Serving not closed")
		}
		rep, err := ds.Shutdown(context.Background())
		if err != nil || rep.Method == "" {
			t.Fatalf("shutdown: %v, method %q", err, rep.Method)
		}
		if resp, _, err := readResponse(c, 10*time.Second); err != nil || resp.StatusCode != 200 {
			t.Errorf("queued request: %v %v", resp, err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		select {
		case <-ds.Serving(): // stays closed
		default:
			t.Error("Serving reopened")
		}
	})
}

// TestServingClosedOnRefusal: a Serve that refuses its listener closes
// Serving too, so that nobody waits for it forever.
func TestServingClosedOnRefusal(t *testing.T) {
	ds := &drain.Server{}
	go ds.Serve(nil)
	select {
	case <-ds.Serving():
	case <-time.After(30 * time.Second):
		t.Fatal("Serving not closed after a refused Serve")
	}
}
