package zerodrop_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// generationMain is one generation of a service built on Serve: it answers
// every request with its pid, prints "serving <generation> <pid> <addr>" once
// served and "report <generation> <cause> <method> <lost> <idle closed>" when
// Serve returns (cause with '_' for spaces; lost: queued connections and
// requests the drain could not serve; idle closed: keep-alive connections the
// drain closed idle).
func generationMain() {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d\n", os.Getpid())
	})}
	rep, err := zerodrop.Serve(context.Background(), srv, []string{os.Getenv("ZD_ADDR")}, zerodrop.Options{
		Handoff:   os.Getenv("ZD_SOCK"),
		ReadyPath: "/ready",
		Grace:     10 * time.Second,
		OnServing: func(gen uint64, addrs []net.Addr) { fmt.Printf("serving %d %d %s\n", gen, os.Getpid(), addrs[0]) },
	})
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	d := rep.Drains[0]
	fmt.Printf("report %d %s %s %d %d\n", rep.Generation, strings.ReplaceAll(rep.Cause, " ", "_"), d.Method, d.Remainder+len(d.HTTP.Forced), d.HTTP.IdleClosed)
}

// TestServeUpgrade runs a service built on Serve through an upgrade and a
// stop under load from Go's http.Transport, a new connection per request:
// SIGHUP makes generation 1 start generation 2 (the same executable, the
// same options), which inherits the listening socket; generation 1 drains
// (release: generation 2 serves the socket); SIGTERM stops generation 2,
// which drains the socket it is now the last holder of. Not one request may
// fail, and the kernel may send no reset.
func TestServeUpgrade(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		sock := filepath.Join(t.TempDir(), "handoff.sock")
		addr := "127.0.0.1:8080"
		s := netnstest.StartSubreaped(t, bin, []string{"ZERODROP_TEST_HELPER=generation", "ZD_SOCK=" + sock, "ZD_ADDR=" + addr}, "-test.run=^$")
		pid1 := servingPID(t, s.Expect(t, "serving 1 "))
		before := netnstest.Snapshot(t)

		l := startLoad(t, "http://"+addr+"/")
		l.waitFor(t, pid1, 100)
		if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pid2 := servingPID(t, s.Expect(t, "serving 2 "))
		rep1 := strings.Fields(s.Expect(t, "report 1 "))
		if ws := s.Reap(t, pid1, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 1 exited with %v", ws)
		}
		l.waitFor(t, pid2, 200)
		failed, firstErr, answered := l.stop()
		if err := syscall.Kill(pid2, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rep2 := strings.Fields(s.Expect(t, "report 2 "))
		if ws := s.Reap(t, pid2, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 2 exited with %v", ws)
		}
		d := before.Delta(t, "Tcp.OutRsts", "TcpExt.ListenDrops")
		t.Logf("answered %v, failed %d; generation 1 %v; generation 2 %v; counters %v", answered, failed, rep1[2:], rep2[2:], d)
		if want := []string{"successor_ready", string(drain.MethodRelease), "0"}; strings.Join(rep1[2:5], " ") != strings.Join(want, " ") {
			t.Errorf("generation 1 stopped with %v, want %v", rep1[2:], want)
		}
		if want := []string{"terminated", string(drain.MethodAccept), "0"}; strings.Join(rep2[2:5], " ") != strings.Join(want, " ") {
			t.Errorf("generation 2 stopped with %v, want %v", rep2[2:], want)
		}
		if failed > 0 || d["Tcp.OutRsts"] != 0 || d["TcpExt.ListenDrops"] != 0 {
			t.Errorf("%d requests failed (first: %v), counters %v; want 0 and +0", failed, firstErr, d)
		}
	})
}

func servingPID(t *testing.T, line string) int {
	t.Helper()
	f := strings.Fields(line)
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return pid
}

// load is four clients requesting url in a loop, a new connection each time,
// for at most two minutes.
type load struct {
	stopped  atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	answered map[int]int // by the pid that answered
	failed   int
	firstErr error
}

func startLoad(t *testing.T, url string) *load {
	l := &load{answered: map[int]int{}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t.Cleanup(func() { l.stop() })
	for range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for !l.stopped.Load() && time.Now().Before(deadline) {
				pid, err := get(c, url)
				l.mu.Lock()
				if err != nil {
					l.failed++
					if l.firstErr == nil {
						l.firstErr = err
					}
				} else {
					l.answered[pid]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func get(c *http.Client, url string) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	return do(c, req)
}

// do sends req once and returns the pid in the answer.
func do(c *http.Client, req *http.Request) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// waitFor waits (60 s at most) until pid has answered n requests.
func (l *load) waitFor(t *testing.T, pid, n int) {
	t.Helper()
	waitAnswered(t, pid, n, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.answered[pid]
	})
}

// waitAnswered waits (60 s at most) until answered, pid's count, reaches n.
func waitAnswered(t *testing.T, pid, n int, answered func() int) {
	t.Helper()
	for range 6000 {
		if answered() >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d never answered %d requests", pid, n)
}

func (l *load) stop() (int, error, map[int]int) {
	l.stopped.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed, l.firstErr, l.answered
}

// TestServeBadInput: each mistake is a typed error, and nothing is left open.
func TestServeBadInput(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		srv := &http.Server{}
		if _, err := zerodrop.Serve(ctx, nil, []string{"127.0.0.1:0"}, zerodrop.Options{}); !errors.Is(err, drain.ErrNoHTTPServer) {
			t.Errorf("nil server: %v, want ErrNoHTTPServer", err)
		}
		if _, err := zerodrop.Serve(ctx, srv, nil, zerodrop.Options{}); !errors.Is(err, zerodrop.ErrNoAddress) {
			t.Errorf("no address: %v, want ErrNoAddress", err)
		}
		// The second address is taken: the first listener must be closed.
		taken, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		var oe *net.OpError
		if _, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0", taken.Addr().String()}, zerodrop.Options{}); !errors.As(err, &oe) || !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("address in use: %v, want a *net.OpError wrapping EADDRINUSE", err)
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		var ip *handoff.InsecurePathError
		if _, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0"}, zerodrop.Options{Handoff: filepath.Join(dir, "h.sock")}); !errors.As(err, &ip) {
			t.Errorf("handoff socket in a world-writable directory: %v, want *handoff.InsecurePathError", err)
		}
	})
}
