package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The built example upgraded three times by SIGHUP under a closed-loop load
// (a new connection per request): no request fails, the generation goes from
// 1 to 4 (as X-Generation and /metrics report it), every old generation exits
// 0 and exactly one server process is left, which the test stops with SIGTERM.
func TestUpgrade(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		bin := build(t)
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		// A fixed port is safe: the namespace is the test's own.
		s := startServer(t, bin, "-addr", "127.0.0.1:8080", "-socket", sock, "-grace", "20s")
		pids := []int{s.serving(t, 1)}
		const url = "http://127.0.0.1:8080/"
		l := startLoad(t, url, 8)
		l.WaitFor(t, 1, 50)
		for gen := 2; gen <= 4; gen++ {
			if err := syscall.Kill(pids[len(pids)-1], syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, s.serving(t, gen))
			s.Expect(t, fmt.Sprintf("generation %d stopped: release", gen-1))
			l.WaitFor(t, gen, 50)
		}
		res := l.Stop()
		t.Logf("requests by generation %v, failed %v", res.ByGen, res.Failed)
		if len(res.Failed) != 0 {
			t.Errorf("failed requests %v, want none", res.Failed)
		}
		for g := 1; g <= 4; g++ {
			if res.ByGen[g] == 0 {
				t.Errorf("generation %d answered no request", g)
			}
		}
		for i := range 20 {
			if gen, err := fetch(url); err != nil || gen != 4 {
				t.Fatalf("request %d after the last upgrade: generation %d, %v; want 4", i, gen, err)
			}
		}
		if body := metrics(t, "http://127.0.0.1:8080/metrics"); !strings.Contains(body, "\nzerodrop_generation 4\n") {
			t.Errorf("/metrics after the last upgrade has no line \"zerodrop_generation 4\":\n%s", body)
		}
		for _, pid := range pids[:3] {
			if ws := s.Reap(t, pid, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
				t.Errorf("old generation pid %d: %v, want exit 0", pid, ws)
			}
		}
		if got := s.Running(); len(got) != 1 || got[0] != pids[3] {
			t.Errorf("server processes %v, want only generation 4's %d", got, pids[3])
		}
		if pid, err := os.ReadFile(filepath.Join(filepath.Dir(sock), "upgrade.pid")); err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(pids[3]) {
			t.Errorf("upgrade.pid = %q, %v; want %d", pid, err, pids[3])
		}
		syscall.Kill(pids[3], syscall.SIGTERM)
		if ws := s.Reap(t, pids[3], 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation 4 after SIGTERM: %v, want exit 0", ws)
		}
	})
}

// SIGTERM with -delay, as Kubernetes sends it: /ready answers 503 at once
// while requests are still served, then the server drains and exits 0.
func TestTerminateWithDelay(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		bin := build(t)
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		s := startServer(t, bin, "-addr", "127.0.0.1:8080", "-socket", sock, "-delay", "5s", "-grace", "20s")
		pid := s.serving(t, 1)
		if code := status(t, "http://127.0.0.1:8080/ready"); code != http.StatusOK {
			t.Fatalf("/ready before SIGTERM: %d, want 200", code)
		}
		syscall.Kill(pid, syscall.SIGTERM)
		code := 0
		for i := 0; i < 500 && code != http.StatusServiceUnavailable; i++ {
			code = status(t, "http://127.0.0.1:8080/ready")
			time.Sleep(5 * time.Millisecond)
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/ready after SIGTERM: %d, want 503", code)
		}
		if gen, err := fetch("http://127.0.0.1:8080/"); err != nil || gen != 1 {
			t.Errorf("request during the delay: generation %d, %v; want 1", gen, err)
		}
		s.Expect(t, "generation 1 stopped: accept")
		if ws := s.Reap(t, pid, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("after SIGTERM: %v, want exit 0", ws)
		}
	})
}

// status does a GET on a new connection and returns the status code.
func status(t *testing.T, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metrics does a GET of /metrics, wants 200 and returns the body.
func metrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v; want 200", url, resp.Status, err)
	}
	return string(body)
}

var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// fetch does one request on a new connection and returns the generation that
// answered.
func fetch(url string) (int, error) { return netnstest.FetchGeneration(client, url) }

// startLoad runs n clients until stop, for at most 3 minutes and 1e6 requests
// each.
func startLoad(t *testing.T, url string, n int) *netnstest.GenLoad {
	return netnstest.StartGenLoad(t, client, url, n, 3*time.Minute)
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true}, {[]string{"-addr", ":0", "-exec", "/bin/true", "-grace", "1s", "-delay", "5s"}, true},
		{[]string{"-grace", "soon"}, false}, {[]string{"extra"}, false}, {[]string{"-nope"}, false},
	} {
		if _, err := parseFlags(tc.args, io.Discard); (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}

// Example_run serves one generation until SIGTERM, upgrading on SIGHUP.
// Compile-only: it runs until signalled and starts other processes.
func Example_run() {
	c := &config{addr: "127.0.0.1:8080", socket: "/run/example/handoff.sock", grace: 30 * time.Second}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Println(err)
	}
}
