package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

func TestMain(m *testing.M) {
	if isWorker() {
		os.Exit(workerMain()) // the supervisor below re-executes this binary
	}
	netnstest.RegisterHelper("supervisor", func() {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		code := supervisorMain(ctx, strings.Fields(os.Getenv("ARGS")), hup, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	})
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// The supervisor with 3 workers serves a closed-loop load (a new connection
// per request) through two rolling restarts without one failed request, and
// afterwards only the last generation answers.
func TestRollingRestart(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		// A fixed port is safe: the namespace is the test's own.
		p := netnstest.StartHelper(t, "supervisor", netnstest.HelperOptions{
			Env: []string{"ARGS=-addr 127.0.0.1:8080 -workers 3 -migration enable -grace 5s -work 2ms"},
		})
		events := lines(t, p.Stdout)
		expect(t, events, "serving generation 1: 3 workers on 127.0.0.1:8080")
		if v, err := linux.ReadSysctl(linux.MigrateReq); err != nil || v != "1" {
			t.Fatalf("tcp_migrate_req = %q, %v; want 1 (set by MigrationEnable)", v, err)
		}
		l := startLoad(t, "http://127.0.0.1:8080/", 8)
		l.waitFor(t, 1, 50)
		var last string
		for gen := 2; gen <= 3; gen++ {
			p.Signal(syscall.SIGHUP)
			last = expect(t, events, fmt.Sprintf("rolled to generation %d: 3 workers", gen))
			l.waitFor(t, gen, 50)
		}
		res := l.stop()
		t.Logf("requests by generation %v, failed %v", res.byGen, res.failed)
		if len(res.failed) != 0 {
			t.Errorf("failed requests %v, want none", res.failed)
		}
		for i := range 20 {
			if gen := get(t, "http://127.0.0.1:8080/"); gen != 3 {
				t.Fatalf("request %d after the last roll served by generation %d, want 3", i, gen)
			}
		}

		p.Signal(syscall.SIGTERM)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("supervisor after SIGTERM: %v, want exit 0", err)
		}
		for _, pid := range pidsOf(last) {
			if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
				t.Errorf("worker %d still there after the supervisor exited (kill 0: %v)", pid, err)
			}
		}
	})
}

// lines delivers the lines of r; the channel closes at EOF.
func lines(t *testing.T, r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// expect waits up to 60 s for a line starting with prefix and returns it.
func expect(t *testing.T, events <-chan string, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-events:
			if !ok {
				t.Fatalf("supervisor output ended before %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
			t.Logf("supervisor: %s", line)
		case <-timeout:
			t.Fatalf("no %q from the supervisor within 60 s", prefix)
		}
	}
}

// pidsOf reads the pids of a supervisor line ("..., pids [1 2 3]").
func pidsOf(line string) []int {
	_, list, _ := strings.Cut(line, "pids [")
	var pids []int
	for _, f := range strings.Fields(strings.TrimSuffix(list, "]")) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get does one request and returns the generation that answered.
func get(t *testing.T, url string) int {
	t.Helper()
	gen, err := fetch(url)
	if err != nil {
		t.Fatal(err)
	}
	return gen
}

func fetch(url string) (int, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	return strconv.Atoi(resp.Header.Get("X-Generation"))
}

// load is a closed loop of clients, each opening a new connection per request.
type load struct {
	mu     sync.Mutex
	byGen  map[int]int
	failed map[string]int // by outcome class
	quit   chan struct{}
	wg     sync.WaitGroup
}

// startLoad runs n clients until stop, for at most 2 minutes and 1e6 requests
// each.
func startLoad(t *testing.T, url string, n int) *load {
	l := &load{byGen: map[int]int{}, failed: map[string]int{}, quit: make(chan struct{})}
	deadline := time.Now().Add(2 * time.Minute)
	for range n {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 1e6 && time.Now().Before(deadline); i++ {
				select {
				case <-l.quit:
					return
				default:
				}
				gen, err := fetch(url)
				l.mu.Lock()
				if err != nil {
					l.failed[netnstest.Classify(err).String()+": "+err.Error()]++
				} else {
					l.byGen[gen]++
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { l.stop() })
	return l
}

// waitFor waits up to 60 s until generation gen has answered n requests.
func (l *load) waitFor(t *testing.T, gen, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l.mu.Lock()
		got := l.byGen[gen]
		l.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation %d answered %d requests in 60 s, want %d", gen, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type result struct {
	byGen  map[int]int
	failed map[string]int
}

// stop ends the load (once) and returns the counts.
func (l *load) stop() result {
	l.mu.Lock()
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	l.mu.Unlock()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return result{byGen: l.byGen, failed: l.failed}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true}, {[]string{"-workers", "2", "-migration", "enable"}, true},
		{[]string{"-workers", "0"}, false}, {[]string{"-migration", "maybe"}, false}, {[]string{"-nope"}, false},
	} {
		if _, err := parseFlags(tc.args, io.Discard); (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}

// Example_serve is one worker without the supervisor: a reuseport listener
// served until ctx ends, then stopped without losing its queue. Compile-only:
// it needs tcp_migrate_req=1 and runs until cancelled.
func Example_serve() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cfg := reuseport.Config{Migration: reuseport.MigrationRequire}
	ln, err := cfg.Listen(ctx, "tcp", "127.0.0.1:8080")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := serve(ctx, ln, handler(1, 0, 0), 10*time.Second, nil); err != nil {
		fmt.Println(err)
	}
}
