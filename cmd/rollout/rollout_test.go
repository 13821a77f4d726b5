package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestMain lets the test binary play every role of the program: the tests
// start it as the command, and the runner starts it as its workers.
func TestMain(m *testing.M) {
	if os.Getenv(envRole) != "" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// Under -race, every process sleeps 1 s at exit by default: that would
	// make each restart (which waits for the old worker) a second longer.
	if os.Getenv("GORACE") == "" {
		os.Setenv("GORACE", "atexit_sleep_ms=100")
	}
	os.Exit(m.Run())
}

// The harness sees a loss: under enough load, the close strategy fails
// requests, while migrate, handoff, ebpf and cpu fail none and their drain
// reports account for every queued connection. The command makes its own
// namespaces, prints the JSON the README documents, exits 0 and leaves no
// process behind.
func TestRollout(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		// Requests time out after 10 s: on a loaded 2-core machine a request can
		// wait seconds for a CPU, which says nothing about restarts.
		out := runCommand(t, nil, "--json", "--duration", "4s", "--concurrency", "64", "--workers", "2", "--restarts", "4", "--timeout", "10s")
		byName := decodeStrategies(t, out)
		if got := slices.Sorted(maps.Keys(byName)); !slices.Equal(got, []string{"close", "cpu", "ebpf", "handoff", "migrate"}) {
			t.Fatalf("strategies %v in the JSON:\n%s", got, out)
		}
		for _, name := range strategyNames() {
			o := byName[name]
			t.Logf("%s: restarts %d, requests %d, failed %d %v, queue lost %s, drains %+v, kernel %+v, p99 %.1f/%.1f ms",
				o.Name, o.Restarts, o.Requests, o.Failed, o.FailedByClass, lost(o.QueueLost), o.Drains, o.Kernel,
				o.P99MSSteady, o.P99MSRestart)
			for _, s := range o.Stops {
				t.Logf("  stop of %d: %s, took %.0f ms, restart took %.0f ms", s.PID, s.Method, s.TookMS, s.RollMS)
			}
			checkOutcome(t, o, 4)
		}
		if c := byName["close"]; c.Failed == 0 {
			t.Errorf("close: 0 failed requests in %d restarts: the harness cannot see a loss", c.Restarts)
		}
	})
}

// With keep-alive clients the table shows the connection handoff: under
// handoff no request fails and no server closes a connection (each goes to
// the successor), while a rolled reuseport group (migrate, a drain.Server
// without a pool to hand its connections to) closes its stopping worker's
// idle ones, which the reconnections count; a request its client sends as
// the server closes such a connection fails (eof), which the table shows
// too. Over TLS, handoff passes the TLS 1.3 connections with their session
// (drain.Server.TLSHandOver): no client connects again; migrate closes them.
func TestRolloutKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"pool", []string{"--clients", "pool"}},
		{"keepalive,tls", []string{"--clients", "keepalive", "--tls"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				args := append([]string{"--json", "--duration", "4s", "--concurrency", "32", "--workers", "2", "--restarts", "4", "--timeout", "10s",
					"--strategies", "migrate,handoff"}, tc.args...)
				byName := decodeStrategies(t, runCommand(t, nil, args...))
				for _, name := range []string{"migrate", "handoff"} {
					o := byName[name]
					t.Logf("%s: requests %d, failed %d %v, dials %d, reconnects %s, server closed %d", name, o.Requests, o.Failed, o.FailedByClass, o.Dials, perRestart(o.Reconnects, 1), o.ServerClosed)
					if len(o.Errors) > 0 || o.Restarts != 4 {
						t.Errorf("%s: %d restarts, errors %v", name, o.Restarts, o.Errors)
					}
					if o.Reconnects == nil {
						t.Errorf("%s: no reconnection count with keep-alive clients", name)
					}
				}
				checkOutcome(t, byName["handoff"], 4)
				h, m := byName["handoff"], byName["migrate"]
				if tc.name == "pool" && h.ServerClosed != 0 {
					t.Errorf("handoff: the servers closed %d connections, want 0 (each handed to the successor)", h.ServerClosed)
				}
				if h.Reconnects == nil || *h.Reconnects != 0 {
					t.Errorf("handoff: reconnections %s in %d restarts, want 0: every keep-alive connection goes to the successor (over TLS 1.3 with its session)",
						perRestart(h.Reconnects, 1), h.Restarts)
				}
				if m.Reconnects != nil && *m.Reconnects == 0 {
					t.Errorf("migrate: 0 reconnections in %d restarts: the table cannot show what a drain costs keep-alive clients", m.Restarts)
				}
			})
		})
	}
}

// checkOutcome checks what every strategy must show, and the zero loss of
// the lossless ones.
func checkOutcome(t *testing.T, o outcome, restarts int) {
	t.Helper()
	if len(o.Errors) > 0 {
		t.Errorf("%s: errors %v", o.Name, o.Errors)
	}
	if o.Restarts != restarts || o.Requests == 0 || o.Generations < 2 {
		t.Errorf("%s: %d restarts, %d requests, %d generations answered; want %d, > 0, >= 2",
			o.Name, o.Restarts, o.Requests, o.Generations, restarts)
	}
	var sum int64
	for _, n := range o.FailedByClass {
		sum += n
	}
	if sum != o.Failed {
		t.Errorf("%s: failed %d but classes add up to %d", o.Name, o.Failed, sum)
	}
	want := map[string]string{"migrate": "migrate", "handoff": "release", "ebpf": "accept", "cpu": "step-out"}[o.Name]
	if want == "" {
		return
	}
	if o.Failed != 0 || o.QueueLost == nil || *o.QueueLost != 0 || o.Drains.Forced != 0 {
		t.Errorf("%s: failed %d %v (first errors %v; around restarts %+v), queue lost %s, forced %d; want 0, 0, 0",
			o.Name, o.Failed, o.FailedByClass, o.FirstErrors, o.Marks, lost(o.QueueLost), o.Drains.Forced)
	}
	if o.Drains.Reports != o.Restarts {
		t.Errorf("%s: %d drain reports for %d restarts", o.Name, o.Drains.Reports, o.Restarts)
	}
	for _, s := range o.Stops {
		if s.Method != want || len(s.Errors) > 0 || s.Steered != (o.Name == "ebpf") {
			t.Errorf("%s: stop of pid %d by %q (%s; steered %v) with errors %v, want %q without", o.Name, s.PID, s.Method, s.Why, s.Steered, s.Errors, want)
		}
	}
}

// decodeStrategies decodes --json output and checks the fields every item
// must have.
func decodeStrategies(t *testing.T, b []byte) map[string]outcome {
	t.Helper()
	var raw struct {
		Strategies []map[string]json.RawMessage `json:"strategies"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, b)
	}
	var typed struct {
		Strategies []outcome `json:"strategies"`
	}
	if err := json.Unmarshal(b, &typed); err != nil {
		t.Fatal(err)
	}
	out := map[string]outcome{}
	for i, item := range raw.Strategies {
		for _, k := range []string{"name", "restarts", "requests", "failed", "failed_by_class", "p99_ms_steady", "p99_ms_restart", "queue_lost"} {
			if _, ok := item[k]; !ok {
				t.Errorf("strategy %d lacks %q: %s", i, k, b)
			}
		}
		for _, c := range []load.Class{load.Reset, load.Refused, load.EOF, load.Timeout} {
			if _, ok := typed.Strategies[i].FailedByClass[c]; !ok {
				t.Errorf("strategy %d: failed_by_class lacks %q", i, c)
			}
		}
		out[typed.Strategies[i].Name] = typed.Strategies[i]
	}
	return out
}

// Without root, the command runs in a user namespace of its own.
func TestCommandUnprivileged(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err != nil || strings.TrimSpace(string(b)) == "0" {
			t.Skipf("user namespaces are off here (%q, %v)", b, err)
		}
		exe := netnstest.ExecutableCopy(t)
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		out := runCommand(t, &runOpts{path: exe, cred: nobody}, "--json", "--duration", "2s", "--restarts", "1", "--timeout", "10s", "--strategies", "migrate,handoff,cpu")
		byName := decodeStrategies(t, out)
		for _, n := range []string{"migrate", "handoff", "cpu"} {
			checkOutcome(t, byName[n], 1)
		}
	})
}

type runOpts struct {
	path string
	cred *syscall.Credential
}

// runCommand runs the test binary as the command and returns its stdout; it
// fails the test unless it exits 0 within 90 s (about 40 s on a loaded
// 2-core machine). Afterwards no process of the run may be left.
func runCommand(t *testing.T, o *runOpts, args ...string) []byte {
	t.Helper()
	if o == nil {
		o = &runOpts{path: os.Args[0]}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.path, args...)
	cmd.Env = append(os.Environ(), envRole+"="+roleMain)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.cred, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("stderr:\n%s", stderr.String())
	if err != nil {
		t.Fatalf("%v %v: %v\nstdout:\n%s", o.path, args, err, stdout.String())
	}
	left := processesWithEnv(t, envRole)
	for i := 0; i < 20 && len(left) > 0; i++ { // killed ones may take a moment to go
		time.Sleep(100 * time.Millisecond)
		left = processesWithEnv(t, envRole)
	}
	if len(left) > 0 {
		t.Errorf("processes left after the command: %v", left)
	}
	return stdout.Bytes()
}

// processesWithEnv lists the pids (other than ours) whose environment names key.
func processesWithEnv(t *testing.T, key string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' || e.Name() == strconv.Itoa(os.Getpid()) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && (bytes.HasPrefix(b, []byte(key+"=")) || bytes.Contains(b, []byte("\x00"+key+"="))) {
			out = append(out, e.Name())
		}
	}
	return out
}

// Flags: defaults, and every bad value refused with a message.
func TestFlags(t *testing.T) {
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Duration != 8*time.Second || cfg.Concurrency != 64 || cfg.Workers != 4 || cfg.Restarts != 8 ||
		!slices.Equal(cfg.Strategies, []string{"close", "migrate", "handoff", "ebpf", "cpu"}) || cfg.JSON {
		t.Errorf("defaults %+v", cfg)
	}
	cfg, err = parseFlags([]string{"--strategies", "handoff, close,handoff", "--json", "--duration", "3s"}, io.Discard)
	if err != nil || !slices.Equal(cfg.Strategies, []string{"handoff", "close"}) || !cfg.JSON || cfg.Duration != 3*time.Second {
		t.Errorf("got %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{"--strategies", "tableflip"}, {"--strategies", ","}, {"--duration", "10ms"}, {"--concurrency", "0"},
		{"--workers", "1"}, {"--restarts", "-1"}, {"--timeout", "1ms"}, {"extra"}, {"--nope"},
	} {
		var msg bytes.Buffer
		if _, err := parseFlags(args, &msg); err == nil || !strings.Contains(msg.String(), "usage:") {
			t.Errorf("%v: err %v, message %q", args, err, msg.String())
		}
	}
	if code := run([]string{"--help"}, io.Discard, io.Discard); code != exitOK {
		t.Errorf("--help: exit %d", code)
	}
	if code := run([]string{"--workers", "0"}, io.Discard, io.Discard); code != exitUsage {
		t.Errorf("--workers 0: exit %d, want %d", code, exitUsage)
	}
}
