package load

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// poolServer is a local server that counts the connections it accepted and
// checks that every request is a POST with a body; close answers with
// Connection: close.
type poolServer struct {
	url   string
	mu    sync.Mutex
	conns *atomic.Int64
	bad   []string
}

func newPoolServer(t *testing.T, close bool) *poolServer {
	ps := &poolServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || err != nil || !strings.HasPrefix(string(b), "zerodrop-load pool client ") {
			ps.mu.Lock()
			ps.bad = append(ps.bad, r.Method+" "+string(b))
			ps.mu.Unlock()
		}
		if close {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("X-Generation", "3")
		io.WriteString(w, "ok\n")
	}))
	ps.conns = countConns(srv)
	srv.Start()
	t.Cleanup(srv.Close)
	ps.url = srv.URL + "/"
	return ps
}

func (ps *poolServer) check(t *testing.T, conns int64) {
	t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if len(ps.bad) > 0 {
		t.Errorf("%d requests not a pool POST, first %q", len(ps.bad), ps.bad[0])
	}
	if ps.conns.Load() != conns {
		t.Errorf("server accepted %d connections, the clients dialled %d", ps.conns.Load(), conns)
	}
}

// Each client of a pool keeps its one connection: as many dials as clients,
// and every request answered.
func TestPool(t *testing.T) {
	ps := newPoolServer(t, false)
	// 48 requests, about 3 a client, however slow the machine: beside a
	// CPU hog (load 20) 500 ms of load sent only 30.
	res := run(t, t.Context(), Config{URL: ps.url, Pool: 16, PoolMin: 10 * time.Millisecond,
		PoolMax: 40 * time.Millisecond, Requests: 16 * 3, Duration: time.Minute, Header: "X-Generation"})
	if res.Requests != 16*3 || res.Failed != 0 || res.Headers["3"] != res.Requests {
		t.Errorf("requests %d failed %d headers %v errors %v; want 48, all ok from generation 3",
			res.Requests, res.Failed, res.Headers, res.Errors)
	}
	if res.Pool != 16 || res.Dials != 16 || res.ServerClosed+res.ClientClosed+res.AskedClose != 0 {
		t.Errorf("pool %d, dials %d, closed by the server %d, by the clients %d, asked %d; want 16 clients that dialled once each, and no close",
			res.Pool, res.Dials, res.ServerClosed, res.ClientClosed, res.AskedClose)
	}
	ps.check(t, res.Dials)
}

// A server that closes the connection after each reply makes every request
// dial again: the dials count each reconnection, AskedClose each reply
// that said Connection: close, ClientClosed the connections the Transport
// closed for it (before the run's end: all but the last few).
func TestPoolReconnects(t *testing.T) {
	ps := newPoolServer(t, true)
	res := run(t, t.Context(), Config{URL: ps.url, Pool: 4, PoolMin: 10 * time.Millisecond,
		PoolMax: 20 * time.Millisecond, Requests: 40})
	if res.Requests != 40 || res.Failed != 0 || res.Dials != 40 {
		t.Errorf("requests %d failed %d dials %d errors %v; want 40 ok on 40 connections",
			res.Requests, res.Failed, res.Dials, res.Errors)
	}
	if res.AskedClose != 40 || res.ClientClosed < 40-4 || res.ClientClosed > 40 {
		t.Errorf("asked to close %d, closed by the clients %d; want 40, and 36 to 40 (the last ones may close as the run ends)",
			res.AskedClose, res.ClientClosed)
	}
	ps.check(t, res.Dials)
}

// A request the server reads and never answers fails, and is not retried on
// another connection: one dial per request, every one counted as failed.
func TestPoolNoRetry(t *testing.T) {
	url := tcpServer(t, func(*net.TCPConn, <-chan struct{}) {})
	res := run(t, t.Context(), Config{URL: url, Pool: 3, PoolMin: time.Millisecond,
		PoolMax: 5 * time.Millisecond, Requests: 12, Timeout: time.Second})
	if res.Requests != 12 || res.FailedByClass[EOF] != 12 || res.Dials != 12 {
		t.Errorf("requests %d, failed by class %v, dials %d, errors %v; want 12 eof on 12 connections",
			res.Requests, res.FailedByClass, res.Dials, res.Errors)
	}
}

func TestPoolConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "http://127.0.0.1/", Pool: -1},
		{URL: "http://127.0.0.1/", Pool: 2, Rate: 10},
		{URL: "http://127.0.0.1/", Pool: 2, PoolMin: time.Second, PoolMax: time.Millisecond},
		{URL: "http://127.0.0.1/", Pool: 2, PoolMin: -time.Second},
	} {
		if _, err := New(cfg); err == nil || !strings.HasPrefix(err.Error(), "load: ") {
			t.Errorf("New(%+v): %v, want a load: error", cfg, err)
		}
	}
}

// countConns counts the connections srv accepts (its ConnState hook); set it
// before srv starts.
func countConns(srv *httptest.Server) *atomic.Int64 {
	n := new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return n
}
