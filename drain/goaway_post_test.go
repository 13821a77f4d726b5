package drain_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestHTTP2PostsAcrossHandoffs: 8 of Go's HTTP/2 Transports (ALPN h2 over
// TLS), 8 workers on each, send POSTs whose body net/http cannot send again
// (GetBody nil) without a pause, across 100 handoffs: generation g+1 serves
// a duplicate of the socket, then generation g drains (drain.Server,
// Options.Shared). Every POST is answered.
//
// A failed POST is one of two kinds, told apart by the request's trace:
// sent (its HEADERS written: httptrace's WroteHeaders ran), which a server
// refused or closed its connection under, the server's fault; or never
// sent, which Go's client (1.26, h2_bundle.go) fails itself when the
// connection it had chosen and reserved a stream on (ReserveNewRequest)
// reads a GOAWAY before the stream gets its id (awaitOpenSlotForStreamLocked
// returns errClientConnUnusable, cleanupWriteRequest closes the body, the
// retry finds no other connection, and net/http's rewindBody cannot get
// the body again: "net/http: cannot rewind body after connection loss",
// golang/go#62450). Only a stream whose id is not yet assigned can fail so:
// errClientConnUnusable comes from nowhere else.
//
// No server can see a request the client has not sent, so the drain holds
// its responses before the first step until the client has opened no
// stream for a while and for a whole PING round trip (h2Conn.awaitQuiet):
// nothing then wakes a new request, and those already woken have opened
// their streams. Before, with one probe, 11 and 14 POSTs failed in 100
// handoffs (load average 23 and 36 on 2 cores), all never sent, 0 sent;
// with the quiet, 1 and 0 (load 23 and 46). The one left had chosen its
// connection 59 ms before the first step was written while the client's
// reader answered the probes: a goroutine of the client's that its
// scheduler did not run for that long, which no server can wait out. So
// sent POSTs must all be answered, and never-sent ones at most 1 in 50
// handoffs.
//
// Under the race detector (as CI runs it), 25 handoffs, and only a sent
// stream refused or cut by a GOAWAY (an error naming the GOAWAY) fails the
// test: on this 2-core machine at load average 25-30 with the race
// detector, main's drain lost 8 sent POSTs (unexpected EOF: new TLS
// connections the draining server closed as silent after NewConnGrace, its
// handshakes slower than that) and 13 never sent in 25 handoffs, and this
// one 5 to client timeouts (10 s) and 9 never sent: the machine, not the
// drain. The servers' NewConnGrace is 5 s, for the same reason.
func TestHTTP2PostsAcrossHandoffs(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		handoffs := 100
		if raceDetector {
			handoffs = 25
		}
		if s := os.Getenv("ZERODROP_TEST_HANDOFFS"); s != "" {
			handoffs, _ = strconv.Atoi(s)
		}
		res := postsAcrossHandoffs(t, handoffCfg{handoffs: handoffs, transports: 8, workers: 8, h2: true})
		t.Logf("%d handoffs: %s", handoffs, res)
		switch {
		case res.refused > 0:
			t.Errorf("%d sent POSTs refused or cut by a GOAWAY (the server's); first: %v", res.refused, res.first)
		case raceDetector:
		case res.sent > 0 || res.neverSent > handoffs/50 || res.other > 0:
			t.Errorf("%d POSTs failed: %d sent, %d never sent (Go's client, golang/go#62450; at most %d), %d other; first: %v",
				res.sent+res.neverSent+res.other, res.sent, res.neverSent, handoffs/50, res.other, res.first)
		}
	})
}

// postResult counts what postsAcrossHandoffs saw.
type postResult struct {
	ok, sent, neverSent, other int
	refused                    int      // of sent: refused or cut by a GOAWAY
	first                      []string // the first failures, with their kind
	unacked, http2, forced     int      // summed over the drain reports
	silent                     int      // likewise: connections closed without a request
}

func (r postResult) String() string {
	return fmt.Sprintf("%d POSTs answered, failed: %d sent (%d refused by a GOAWAY), %d never sent, %d other; reports: %d HTTP/2 connections, %d unacked, %d forced, %d silent closed",
		r.ok, r.sent, r.refused, r.neverSent, r.other, r.http2, r.unacked, r.forced, r.silent)
}

// handoffCfg is what postsAcrossHandoffs runs.
type handoffCfg struct {
	handoffs, transports, workers int
	h2                            bool // HTTP/2 (ALPN h2), else HTTP/1.1, over TLS
	// linger: the clients close their connections lingering (lingerConn),
	// so that they never reset one.
	linger bool
}

func postsAcrossHandoffs(t *testing.T, cfg handoffCfg) postResult {
	netnstest.CheckLeaks(t)
	handoffs, transports, workers := cfg.handoffs, cfg.transports, cfg.workers
	cert := netnstest.NewCert(t)
	l0 := listenTCP(t, "127.0.0.1:0") // holds the socket; each generation serves a duplicate
	defer l0.Close()
	url := "https://" + l0.Addr().String() + "/"

	var served [2]atomic.Int64 // by generation parity
	start := func(gen int) (*drain.Server, func() error) {
		f, err := l0.File()
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		h := echoNamed(strconv.Itoa(gen))
		hs := &http.Server{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r)
				served[gen%2].Add(1)
			})}
		ds := &drain.Server{HTTP: hs, Listener: drain.Options{Shared: true}, NewConnGrace: 5 * time.Second}
		return ds, serve(t, func() error { return ds.ServeTLS(l, "", "") })
	}

	var (
		mu  sync.Mutex
		res postResult
	)
	// When each connection (by the client's address) got its first step.
	var stepped sync.Map
	var rounds []int // probes acked per connection
	defer drain.SetTestHookFirstStep(func(remote string, n int) {
		stepped.Store(remote, time.Now())
		mu.Lock()
		rounds = append(rounds, n)
		mu.Unlock()
	})()
	fail := func(kind *int, what string) {
		mu.Lock()
		defer mu.Unlock()
		*kind++
		if len(res.first) < 10 {
			res.first = append(res.first, what)
		}
	}
	post := func(c *http.Client) {
		var wrote atomic.Bool
		var (
			gotAt time.Time
			conn  string
		)
		begun := time.Now()
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) {
				if conn == "" {
					gotAt, conn = time.Now(), i.Conn.LocalAddr().String()
				}
			},
			WroteHeaders: func() { wrote.Store(true) }})
		req, err := http.NewRequestWithContext(ctx, "POST", url, onceBody{strings.NewReader("x")})
		if err != nil {
			t.Error(err)
			return
		}
		req.ContentLength = 1
		resp, err := c.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		switch {
		case err == nil:
			mu.Lock()
			res.ok++
			mu.Unlock()
		case wrote.Load() && strings.Contains(err.Error(), "GOAWAY"):
			fail(&res.sent, "sent, refused: "+err.Error())
			mu.Lock()
			res.refused++
			mu.Unlock()
		case wrote.Load():
			fail(&res.sent, "sent: "+err.Error())
		case strings.Contains(err.Error(), "cannot rewind body after connection loss"):
			// When it chose its connection and failed, from that
			// connection's first step.
			at, _ := stepped.Load(conn)
			step, _ := at.(time.Time)
			fail(&res.neverSent, fmt.Sprintf("never sent: begun %v, chose %s %v, failed %v from its first step: %v",
				begun.Sub(step), conn, gotAt.Sub(step), time.Since(step), err))
		default:
			fail(&res.other, "not sent: "+err.Error())
		}
	}

	ds, wait := start(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var trs []*http.Transport
	for range transports {
		tr := &http.Transport{TLSClientConfig: cert.Client("h2"), ForceAttemptHTTP2: true}
		if !cfg.h2 {
			tr.TLSClientConfig, tr.ForceAttemptHTTP2 = cert.Client("http/1.1"), false
		}
		if cfg.linger {
			tr.DialTLSContext = lingerDialer(tr.TLSClientConfig)
		}
		trs = append(trs, tr)
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 1_000_000; n++ { // bounded; stopped long before
					select {
					case <-stop:
						return
					default:
					}
					post(c)
				}
			}()
		}
	}
	defer func() {
		for _, tr := range trs {
			tr.CloseIdleConnections()
		}
	}()
	// waitServed waits until generation gen has answered n more POSTs.
	waitServed := func(gen int, n int64) {
		from := served[gen%2].Load()
		netnstest.WaitCount(t, fmt.Sprintf("POSTs answered by generation %d", gen), int(n), func() int {
			return int(served[gen%2].Load() - from)
		})
	}
	waitServed(0, 200)
	deadline := time.Now().Add(5 * time.Minute)
	for gen := 0; gen < handoffs && time.Now().Before(deadline); gen++ {
		next, nextWait := start(gen + 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		rep, err := ds.Shutdown(ctx)
		cancel()
		if err != nil {
			t.Errorf("generation %d's Shutdown: %v", gen, err)
		}
		if err := wait(); !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("generation %d's Serve: %v", gen, err)
		}
		h := rep.HTTP
		mu.Lock()
		res.http2 += h.HTTP2
		res.unacked += h.GoAwayUnacked
		res.forced += len(h.Forced)
		res.silent += h.SilentClosed
		mu.Unlock()
		ds, wait = next, nextWait
		waitServed(gen+1, 200) // every client under way again
	}
	close(stop)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := ds.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(rounds)
	if n := len(rounds); n > 0 {
		t.Logf("probes acked per connection: median %d, p90 %d, p99 %d, max %d", rounds[n/2], rounds[n*9/10], rounds[n*99/100], rounds[n-1])
	}
	return res
}
