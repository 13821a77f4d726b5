package drain_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// echoNamed answers a POST with "<name> <body>", after sleeping ?sleep=.
func echoNamed(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
			time.Sleep(d)
		}
		fmt.Fprintf(w, "%s %s", name, body)
	})
}

// onceBody is a request body net/http cannot rewind (GetBody stays nil), so
// the Transport never retries the request on another connection.
type onceBody struct{ io.Reader }

// poolClient is a client with one keep-alive connection of its own
// that counts its dials.
func poolClient(dials *atomic.Int64) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, IdleConnTimeout: time.Minute,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// postOnce sends body once, without retry, and returns the answer.
func postOnce(c *http.Client, url, body string) (string, error) {
	req, err := http.NewRequest("POST", url, onceBody{strings.NewReader(body)})
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A keep-alive pool across a drain with HandOver: server A's connections
// (idle ones at once, one busy in a slow request after its response, one
// that has sent nothing yet) go to server B, which serves them with
// ServeConn. 48 clients sending non-retryable POSTs every 1-20 ms see no
// failure and never dial again; B answers every request after the drain;
// A's report counts what it handed over, B's what it received; no reset.
func TestHandOver(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		counters := netnstest.Snapshot(t)
		ln := listenTCP(t, "127.0.0.1:0")
		url := "http://" + ln.Addr().String()
		b := &drain.Server{HTTP: &http.Server{Handler: echoNamed("B")}}
		var offered atomic.Int64
		// slowBegan: A's handler has the slow request (the stop must find
		// it in flight, whatever the scheduler does to the client).
		slowBegan := make(chan struct{})
		var slowOnce sync.Once
		aHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Has("sleep") {
				slowOnce.Do(func() { close(slowBegan) })
			}
			echoNamed("A").ServeHTTP(w, r)
		})
		a := &drain.Server{HTTP: &http.Server{Handler: aHandler}, HandOver: func(ctx context.Context, conns []drain.Detached) (int, error) {
			offered.Add(int64(len(conns)))
			for _, d := range conns {
				if err := b.ServeConn(d.Conn, d.Unread); err != nil {
					return 0, err
				}
			}
			return len(conns), nil
		}}
		served := serve(t, func() error { return a.Serve(ln) })

		const clients = 48
		var dials atomic.Int64
		var mu sync.Mutex
		var failures []error
		answers := map[string]int{}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		cls := make([]*http.Client, clients)
		for i := range cls {
			cls[i] = poolClient(&dials)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 5000; n++ {
					select {
					case <-stop:
						return
					default:
					}
					body := fmt.Sprintf("c%d-%d", i, n)
					got, err := postOnce(cls[i], url, body)
					mu.Lock()
					switch {
					case err != nil:
						failures = append(failures, err)
					case !strings.HasSuffix(got, " "+body):
						failures = append(failures, fmt.Errorf("answer %q to %q", got, body))
					default:
						answers[got[:1]]++
					}
					mu.Unlock()
					time.Sleep(time.Duration(1+rand.IntN(20)) * time.Millisecond)
				}
			}()
		}
		// One connection busy in a slow request across the stop, and one
		// that has sent nothing yet.
		var slowDials atomic.Int64
		slow := poolClient(&slowDials)
		slowDone := make(chan error, 1)
		time.Sleep(200 * time.Millisecond)
		go func() {
			got, err := postOnce(slow, url+"/?sleep=300ms", "slow")
			if err == nil && got != "A slow" {
				err = fmt.Errorf("slow request answered %q, want A (it began there)", got)
			}
			if err == nil {
				// Sent at once after the response: it may reach A before
				// the drain takes the connection (A serves it, then hands
				// the connection over) or after (B serves it); once,
				// either way.
				if got, err = postOnce(slow, url, "slow-2"); err == nil && got != "A slow-2" && got != "B slow-2" {
					err = fmt.Errorf("the request after the slow one got %q", got)
				}
			}
			slowDone <- err
		}()
		silent, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		select {
		case <-slowBegan:
		case <-time.After(10 * time.Second):
			t.Fatal("the slow request did not reach A within 10s")
		}

		rep, err := a.Shutdown(context.Background())
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if err := served(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		silent.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(silent, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsilent")
		resp, err := http.ReadResponse(bufio.NewReader(silent), nil)
		if err != nil {
			t.Fatalf("the silent connection after the drain: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "B silent" {
			t.Errorf("the silent connection got %q, want B's answer", body)
		}
		if err := <-slowDone; err != nil {
			t.Error(err)
		}
		// The slow request's connection was handed over after its response.
		if got, err := postOnce(slow, url, "slow-3"); err != nil || got != "B slow-3" {
			t.Errorf("the slow connection after the drain: %q, %v; want B's answer", got, err)
		}
		time.Sleep(200 * time.Millisecond) // B serves everyone for a while
		close(stop)
		wg.Wait()
		h := rep.HTTP
		t.Logf("A: handed over %d (offered %d), returned %d, idle closed %d, completed %d, took %v; answers %v, dials %d",
			h.HandedOver, offered.Load(), h.HandOverReturned, h.IdleClosed, h.Completed, h.Took, answers, dials.Load())
		for _, err := range failures {
			t.Errorf("client: %v", err)
		}
		if d := dials.Load(); d != clients {
			t.Errorf("%d dials for %d clients: a connection was closed under a client", d, clients)
		}
		if want := clients + 2; h.HandedOver != want || h.HandOverReturned != 0 || h.IdleClosed != 0 || len(h.Forced) != 0 {
			t.Errorf("A's report: handed over %d (want %d), returned %d, idle closed %d, forced %d; want none of those",
				h.HandedOver, want, h.HandOverReturned, h.IdleClosed, len(h.Forced))
		}
		if answers["B"] == 0 {
			t.Error("B answered nothing")
		}
		for _, c := range append(cls, slow) {
			c.CloseIdleConnections()
		}
		silent.Close()
		brep, err := b.Shutdown(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if brep.HTTP.Received != clients+2 {
			t.Errorf("B received %d, want %d", brep.HTTP.Received, clients+2)
		}
		d := counters.Delta(t, "Tcp.OutRsts", "TcpExt.TCPAbortOnData")
		if d["Tcp.OutRsts"] != 0 || d["TcpExt.TCPAbortOnData"] != 0 {
			t.Errorf("counters %v, want no reset", d)
		}
	})
}

// A HandOver that takes nothing: the connections offered are served by A
// again (HandOverReturned), the report says why, and the drain goes on the
// usual way (IdleGrace, then closed idle). A HandOver whose probe fails is
// never offered a connection.
func TestHandOverRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		for _, probeFails := range []bool{false, true} {
			ln := listenTCP(t, "127.0.0.1:0")
			url := "http://" + ln.Addr().String()
			offered := 0
			a := &drain.Server{HTTP: &http.Server{Handler: echoNamed("A")}, IdleGrace: 50 * time.Millisecond,
				HandOver: func(_ context.Context, conns []drain.Detached) (int, error) {
					if conns == nil && !probeFails {
						return 0, nil
					}
					offered += len(conns)
					return 0, errors.New("the successor is gone")
				}}
			served := serve(t, func() error { return a.Serve(ln) })
			var dials atomic.Int64
			cls := make([]*http.Client, 5)
			for i := range cls {
				cls[i] = poolClient(&dials)
				if got, err := postOnce(cls[i], url, "x"); err != nil || got != "A x" {
					t.Fatalf("client %d: %q, %v", i, got, err)
				}
			}
			rep, err := a.Shutdown(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			served()
			h := rep.HTTP
			switch {
			case probeFails && (offered != 0 || h.HandOverError != "" || h.IdleClosed != len(cls)):
				t.Errorf("probe fails: offered %d, report %+v; want nothing offered, %d closed idle", offered, h, len(cls))
			case !probeFails && (offered != len(cls) || h.HandOverReturned != len(cls) || h.HandedOver != 0 ||
				!strings.Contains(h.HandOverError, "gone") || h.IdleClosed != len(cls)):
				t.Errorf("refused: offered %d, report %+v; want %d offered, returned and closed idle", offered, h, len(cls))
			}
			for _, c := range cls {
				c.CloseIdleConnections()
			}
		}
	})
}

// TLS connections are never handed over: an idle one is closed after
// IdleGrace and counted apart.
func TestHandOverSkipsTLS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		cert := netnstest.NewCert(t)
		ln := listenTCP(t, "127.0.0.1:0")
		offered := 0
		a := &drain.Server{HTTP: &http.Server{Handler: echoNamed("A")}, IdleGrace: 50 * time.Millisecond,
			HandOver: func(_ context.Context, conns []drain.Detached) (int, error) {
				offered += len(conns)
				return 0, nil
			}}
		served := serve(t, func() error { return a.ServeTLS(ln, cert.CertFile, cert.KeyFile) })
		tr := &http.Transport{TLSClientConfig: cert.Client("http/1.1")}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest("POST", "https://"+ln.Addr().String(), strings.NewReader("x"))
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.TLS == nil {
			t.Fatal("not TLS")
		}
		rep, err := a.Shutdown(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		served()
		if h := rep.HTTP; offered != 0 || h.HandedOver != 0 || h.IdleClosed != 1 || h.IdleClosedTLS != 1 {
			t.Errorf("offered %d, report %+v; want none offered, 1 closed idle, counted TLS", offered, h)
		}
	})
}

// A connection handed over (ServeConn) is served before the listener's
// ServeTLS begins, as in a successor that receives its predecessor's idle
// connections while it starts. net/http's ServeTLS reads the server's
// TLSNextProto before its first Accept; the drain writes it (its HTTP/2
// two-step hooks) at the first connection, here the handed-over one. The
// race detector failed this test before the two were serialized (the
// bench's TLS pool worker saw it first: twoStep against
// net/http.(*Server).protocols), and an unsynchronized map write beside a
// read can also stop the program. Both paths then serve: HTTP/1.1 on the
// handed-over connection, HTTP/2 and HTTP/1.1 over TLS on the listener.
func TestServeConnBeforeServeTLS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		cert := netnstest.NewCert(t)
		// NextProtos names h2, so that the Serve under ServeConn sets
		// HTTP/2 up and the drain installs its hooks at that connection.
		// BaseContext holds the Serve under ServeConn, before its first
		// Accept, for a moment (a sleep: no synchronization the race
		// detector could see), so that ServeTLS reads TLSNextProto while
		// the drain's hooks are about to be written, as in the worker.
		var bases atomic.Int64
		hs := &http.Server{Handler: echoNamed("S"), TLSConfig: &tls.Config{NextProtos: []string{"h2", "http/1.1"}},
			BaseContext: func(net.Listener) context.Context {
				if bases.Add(1) == 1 {
					time.Sleep(300 * time.Millisecond)
				}
				return context.Background()
			}}
		s := &drain.Server{HTTP: hs}
		client, c := handedConn(t)
		ln := listenTCP(t, "127.0.0.1:0")
		servedc := make(chan func() error, 1)
		go func() { // ServeConn returns once net/http has c: after the sleep
			time.Sleep(50 * time.Millisecond)
			servedc <- serve(t, func() error { return s.ServeTLS(ln, cert.CertFile, cert.KeyFile) })
		}()
		if err := s.ServeConn(c, nil); err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(client, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
		if _, body, err := readResponse(client, 10*time.Second); err != nil || body != "S ok" {
			t.Fatalf("handed-over connection: %q, %v", body, err)
		}
		served := <-servedc
		for _, proto := range []string{"h2", "http/1.1"} {
			tr := &http.Transport{TLSClientConfig: cert.Client(proto), ForceAttemptHTTP2: proto == "h2"}
			req, _ := http.NewRequest("POST", "https://"+ln.Addr().String(), strings.NewReader(proto))
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("%s: %v", proto, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			tr.CloseIdleConnections()
			if wantMajor := map[string]int{"h2": 2, "http/1.1": 1}[proto]; err != nil || string(b) != "S "+proto || resp.ProtoMajor != wantMajor {
				t.Errorf("%s over TLS: %q (HTTP/%d), %v", proto, b, resp.ProtoMajor, err)
			}
		}
		client.Close()
		if _, err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := served(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	})
}

// ServeConn refuses a nil connection, and once Shutdown has stopped taking
// connections it closes the one it is given and says http.ErrServerClosed.
func TestServeConnAfterShutdown(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		s := &drain.Server{HTTP: &http.Server{Handler: echoNamed("S")}}
		if err := s.ServeConn(nil, nil); err == nil {
			t.Error("ServeConn(nil) accepted")
		}
		client, c := handedConn(t)
		// Served before the drain, with unconsumed bytes: the request is
		// the unread part and the rest of it.
		if err := s.ServeConn(c, []byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Len")); err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(client, "gth: 2\r\n\r\nok")
		if _, body, err := readResponse(client, 10*time.Second); err != nil || body != "S ok" {
			t.Fatalf("served connection: %q, %v", body, err)
		}
		if _, err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		client2, c2 := handedConn(t)
		if err := s.ServeConn(c2, nil); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeConn after Shutdown: %v, want http.ErrServerClosed", err)
		}
		client2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := client2.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the refused connection: read %v, want EOF (closed)", err)
		}
	})
}
