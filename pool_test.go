package zerodrop_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// poolRoll is a run of TestServePoolRolls: the workers' report fields
// summed (see generationMain), and what the clients saw.
type poolRoll struct {
	idleClosed, handedOver, handedTLS, notHandedTLS int
	failed                                          int
	byClass                                         map[string]int
	first                                           error
	p                                               *kaPool
}

// rollServePool starts two workers (generation helpers, env) on addr in a
// SO_REUSEPORT group, clients keep-alive clients (over TLS with cfg, when
// set), and rolls the pool: a replacement starts, then the worker it
// replaces is stopped (SIGTERM); each roll waits for the replacement to
// answer and half the clients to have been answered again.
func rollServePool(t *testing.T, env []string, addr string, clients, rolls int, cfg *tls.Config) poolRoll {
	bin := netnstest.ExecutableCopy(t)
	type worker struct {
		s   *netnstest.Subreaped
		pid int
	}
	start := func() worker {
		s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
		return worker{s, servingPID(t, s.Expect(t, "serving 1 "))}
	}
	var r poolRoll
	field := func(rep []string, i int) int {
		if len(rep) <= i {
			return 0
		}
		n, _ := strconv.Atoi(rep[i])
		return n
	}
	stop := func(w worker) {
		if err := syscall.Kill(w.pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rep := strings.Fields(w.s.Expect(t, "report 1 "))
		if ws := w.s.Reap(t, w.pid, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("worker %d exited with %v", w.pid, ws)
		}
		r.idleClosed += field(rep, 5)
		r.handedOver += field(rep, 6)
		r.handedTLS += field(rep, 10)
		r.notHandedTLS += field(rep, 11)
	}
	slots := []worker{start(), start()}
	scheme := "http"
	if cfg != nil {
		scheme = "https"
	}
	r.p = startKAPoolTLS(t, scheme+"://"+addr+"/", clients, cfg)
	waitAnswered(t, 0, 2*clients, r.p.total)
	for n := range rolls {
		i := n % len(slots)
		next := start()
		stop(slots[i])
		slots[i] = next
		waitAnswered(t, next.pid, r.p.total()+clients/2, r.p.total)
	}
	r.failed, r.byClass, r.first = r.p.stop()
	for _, w := range slots {
		stop(w)
	}
	return r
}

// TestServePoolRolls runs 256 keep-alive clients posting non-retryable
// requests against a SO_REUSEPORT pool of two workers built on Serve with
// Options.Pool, and rolls it (rollServePool). Each stopped worker passes its
// connections to the newest sibling, so no request fails and no client
// connects again: 256 dials in all. CI runs 10 rolls; ZD_POOL_ROLLS=100
// runs more. ZD_POOL_OFF=1 runs the rolls without Options.Pool, for
// comparison: no failure expected (IdleGrace), but the clients reconnect.
func TestServePoolRolls(t *testing.T) {
	const clients = 256
	rolls := 10
	if n, err := strconv.Atoi(os.Getenv("ZD_POOL_ROLLS")); err == nil && n > 0 && n <= 1000 {
		rolls = n
	}
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		pool := t.TempDir()
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_ADDR=" + addr}
		off := os.Getenv("ZD_POOL_OFF") != ""
		if !off {
			env = append(env, "ZD_POOL="+pool)
		}
		counters := netnstest.Snapshot(t)
		t0 := time.Now()
		r := rollServePool(t, env, addr, clients, rolls, nil)
		took := time.Since(t0)
		d := counters.Delta(t, "Tcp.OutRsts", "Tcp.ActiveOpens")
		t.Logf("%d clients, %d rolls in %v: %d failed %v (first: %v); %d dials, %d connections closed by the server; the stopped workers handed over %d connections and closed %d idle; counters %v",
			clients, rolls, took.Round(time.Millisecond), r.failed, r.byClass, r.first, r.p.dials.Load(), r.p.serverClosed.Load(), r.handedOver, r.idleClosed, d)
		if r.failed > 0 {
			t.Errorf("%d requests failed %v (first: %v), want 0", r.failed, r.byClass, r.first)
		}
		if off {
			return
		}
		if n := r.p.serverClosed.Load(); n != 0 {
			t.Errorf("%d connections closed by the server (%d dials for %d clients): a connection was closed under a client", n, r.p.dials.Load(), clients)
		}
		if r.handedOver == 0 {
			t.Error("no connection handed over")
		}
		if ents, _ := os.ReadDir(pool); len(ents) != 0 {
			t.Errorf("the pool directory still holds %d entries after every worker stopped", len(ents))
		}
	})
}

// TestServePoolRollsTLS: TestServePoolRolls over HTTPS with
// Options.TLSHandoff: 32 TLS 1.3 keep-alive clients of a two-worker pool,
// 6 rolls; each stopped worker passes its idle TLS connections to the newest
// sibling with their session, so no request fails and no client connects
// (or shakes hands) again: one dial per client, but for those a client's
// Transport made on its own (see kaPool).
func TestServePoolRollsTLS(t *testing.T) {
	const clients, rolls = 32, 6
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		cert := netnstest.NewCert(t)
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_ADDR=" + addr, "ZD_POOL=" + t.TempDir(),
			"ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile, "ZD_TLS_HANDOFF=1"}
		cfg := cert.Client()
		cfg.MinVersion = tls.VersionTLS13
		r := rollServePool(t, env, addr, clients, rolls, cfg)
		p := r.p
		d, own := p.dials.Load(), p.clientClosed.Load()
		t.Logf("%d TLS clients, %d rolls: %d failed %v (first: %v); %d dials, %d closed by the server, %d by the clients, %d asked to close; the stopped workers handed over %d TLS connections, %d not",
			clients, rolls, r.failed, r.byClass, r.first, d, p.serverClosed.Load(), own, p.askedClose.Load(), r.handedTLS, r.notHandedTLS)
		if r.failed > 0 {
			t.Errorf("%d requests failed %v (first: %v), want 0", r.failed, r.byClass, r.first)
		}
		if p.serverClosed.Load() != 0 || p.askedClose.Load() != 0 || d > clients+own {
			t.Errorf("%d dials for %d clients (%d closed by the clients on their own), %d closed by the server, %d asked to close: want no reconnect the server caused",
				d, clients, own, p.serverClosed.Load(), p.askedClose.Load())
		}
		if r.handedTLS == 0 {
			t.Error("no TLS connection handed over")
		}
	})
}

// TestServePoolWedgedSibling stops a pool worker whose newest sibling is
// wedged (listening, never accepting: SIGSTOPped). The stopping worker
// gives that sibling a short dial of its own, skips to the next one, which
// takes its keep-alive connections, and its Serve returns without error:
// every client's next request is answered by the live sibling on the same
// connection. (The wedged sibling held the stop for its whole Grace, the
// holder scan then ran on an expired ctx, and Serve returned "context
// deadline exceeded".)
func TestServePoolWedgedSibling(t *testing.T) {
	const clients = 8
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_ADDR=" + addr, "ZD_POOL=" + t.TempDir()}
		start := func() (*netnstest.Subreaped, int) {
			s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
			return s, servingPID(t, s.Expect(t, "serving 1 "))
		}
		sa, a := start()
		// Each client holds one keep-alive connection, to a (the only
		// worker yet); a dial after that one counts.
		var dials atomic.Int64
		cs := make([]*http.Client, clients)
		for i := range cs {
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, IdleConnTimeout: time.Hour,
				DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}}
			t.Cleanup(tr.CloseIdleConnections)
			cs[i] = &http.Client{Timeout: 20 * time.Second, Transport: tr}
		}
		get := func(c *http.Client) (int, error) {
			resp, err := c.Get("http://" + addr + "/")
			if err != nil {
				return 0, err
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				return 0, err
			}
			return strconv.Atoi(strings.TrimSpace(string(b)))
		}
		for i, c := range cs {
			if pid, err := get(c); err != nil || pid != a {
				t.Fatalf("client %d: pid %d, %v; want %d", i, pid, err, a)
			}
		}
		aReaped := false
		sl, live := start()
		sw, wedged := start() // the newest: tried first
		// Every worker ends here, by its pid, each reaped by its own
		// Subreaped (they run the same executable).
		t.Cleanup(func() {
			for _, w := range []struct {
				s   *netnstest.Subreaped
				pid int
			}{{sw, wedged}, {sl, live}, {sa, a}} {
				if w.pid == a && aReaped {
					continue
				}
				syscall.Kill(w.pid, syscall.SIGCONT)
				syscall.Kill(w.pid, syscall.SIGKILL)
				w.s.Reap(t, w.pid, 10*time.Second)
			}
		})
		if err := syscall.Kill(wedged, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitStopped(t, wedged)
		if err := syscall.Kill(a, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		ws := sa.Reap(t, a, 60*time.Second)
		aReaped = true
		if !ws.Exited() || ws.ExitStatus() != 0 {
			sa.Expect(t, "error ")
			t.Fatalf("the stopped worker: %v, want exit 0", ws)
		}
		rep := strings.Fields(sa.Expect(t, "report 1 "))
		if len(rep) < 7 || rep[6] != strconv.Itoa(clients) {
			t.Errorf("report %v: want %d connections handed over", rep, clients)
		}
		for i, c := range cs {
			if pid, err := get(c); err != nil || pid != live {
				t.Errorf("client %d after the stop: pid %d, %v; want the live sibling %d", i, pid, err, live)
			}
		}
		if n := dials.Load(); n != clients {
			t.Errorf("%d dials for %d clients: a connection was not handed over", n, clients)
		}
	})
}

// waitStopped waits (at most 60 s) until every thread of pid is stopped: a
// SIGSTOP takes effect as each thread is next scheduled.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		stopped := 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command's closing parenthesis.
			if i := strings.LastIndexByte(string(b), ')'); err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T' {
				stopped++
			}
		}
		if stopped == len(tasks) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: %d of %d threads stopped after 60 s", pid, stopped, len(tasks))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
