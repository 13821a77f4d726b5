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
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
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
		l.WaitFor(t, 1, 50)
		var last string
		for gen := 2; gen <= 3; gen++ {
			p.Signal(syscall.SIGHUP)
			last = expect(t, events, fmt.Sprintf("rolled to generation %d: 3 workers", gen))
			l.WaitFor(t, gen, 50)
		}
		res := l.Stop()
		t.Logf("requests by generation %v, failed %v", res.ByGen, res.Failed)
		if len(res.Failed) != 0 {
			t.Errorf("failed requests %v, want none", res.Failed)
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

func fetch(url string) (int, error) { return netnstest.FetchGeneration(client, url) }

// startLoad runs n clients until stop, for at most 2 minutes and 1e6 requests
// each.
func startLoad(t *testing.T, url string, n int) *netnstest.GenLoad {
	return netnstest.StartGenLoad(t, client, url, n, 2*time.Minute)
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
// served until SIGTERM, then stopped without losing its queue. Compile-only:
// it needs tcp_migrate_req=1 and runs until signalled.
func Example_serve() {
	cfg := reuseport.Config{Migration: reuseport.MigrationRequire}
	srv := &http.Server{Handler: handler(1, 0, 0), ReadHeaderTimeout: 10 * time.Second}
	rep, err := zerodrop.Serve(context.Background(), srv, []string{"127.0.0.1:8080"}, zerodrop.Options{Config: zerodrop.Config{Handoff: handoff.Config{Listen: cfg}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(rep.Drains[0].Method)
}
