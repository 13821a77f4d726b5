package zerodrop_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// h2loadResult is h2load's request line: "requests: N total, N started, N
// done, N succeeded, N failed, N errored, N timeout".
type h2loadResult struct {
	done, succeeded, failed, errored, timeout int
}

var h2loadLine = regexp.MustCompile(`requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)

func parseH2load(out []byte) (h2loadResult, error) {
	m := h2loadLine.FindSubmatch(out)
	if m == nil {
		return h2loadResult{}, fmt.Errorf("no requests line in h2load's output %q", out)
	}
	var n [5]int
	for i := range n {
		n[i], _ = strconv.Atoi(string(m[i+1]))
	}
	return h2loadResult{n[0], n[1], n[2], n[3], n[4]}, nil
}

// TestServeUpgradeH2load: h2load (nghttp2, a client nobody here wrote)
// drives HTTP/2 over TLS, 8 connections with up to 16 streams each, while a
// service built on Serve upgrades through handoff 10 times. Each old
// generation's connections are told to go away in two steps (drain's
// GOAWAY 2^31-1 and PING, then net/http's GOAWAY), so no stream h2load sent
// is ignored; h2load still counts as failed a stream it had queued, not
// sent, when the first GOAWAY arrived (nghttp2 refuses it, h2load does not
// retry: see BENCHMARKS.md). The figure is logged; the test asserts that
// requests were made in every generation and that no drain lost a
// connection.
func TestServeUpgradeH2load(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		h2load, err := exec.LookPath("h2load")
		if err != nil {
			t.Fatalf("this test needs h2load (apt-get install nghttp2-client; .ci/run does): %v", err)
		}
		upgrades := 10
		if n, err := strconv.Atoi(os.Getenv("ZERODROP_H2LOAD_UPGRADES")); err == nil && n > 0 {
			upgrades = n // for BENCHMARKS.md: 100
		}
		cert := netnstest.NewCert(t)
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:8080"
		s := netnstest.StartSubreaped(t, bin, []string{"ZERODROP_TEST_HELPER=generation", "ZD_ADDR=" + addr,
			"ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"), "ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile}, "-test.run=^$")
		pid := servingPID(t, s.Expect(t, "serving 1 "))

		var total h2loadResult
		lost := 0
		for gen := 1; gen <= upgrades; gen++ {
			run := startH2load(t, h2load, addr)
			time.Sleep(500 * time.Millisecond) // the load is under way
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			next := servingPID(t, s.Expect(t, fmt.Sprintf("serving %d ", gen+1)))
			lost += reportLost(t, s.Expect(t, fmt.Sprintf("report %d ", gen)))
			if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
				t.Errorf("generation %d exited with %v", gen, ws)
			}
			pid = next
			res := run()
			total.done += res.done
			total.succeeded += res.succeeded
			total.failed += res.failed
			total.errored += res.errored
			total.timeout += res.timeout
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		lost += reportLost(t, s.Expect(t, fmt.Sprintf("report %d ", upgrades+1)))
		s.Reap(t, pid, 30*time.Second)
		t.Logf("h2load -c 8 -m 16 over %d upgrades: %d done, %d succeeded, %d failed, %d errored, %d timeout; drains lost %d",
			upgrades, total.done, total.succeeded, total.failed, total.errored, total.timeout, lost)
		if total.succeeded < 100*upgrades || lost != 0 {
			t.Errorf("%d requests succeeded, drains lost %d connections; want >= %d and 0", total.succeeded, lost, 100*upgrades)
		}
	})
}

// startH2load runs h2load for 2 s (it ends a client at the first GOAWAY, so
// each run straddles one upgrade) and returns a func that waits for it, by
// its pid, and parses its figures.
func startH2load(t *testing.T, h2load, addr string) func() h2loadResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, h2load, "-c", "8", "-m", "16", "-t", "1", "-D", "2", "--warm-up-time=0", "https://"+addr+"/")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() h2loadResult {
		t.Helper()
		defer cancel()
		werr := cmd.Wait()
		res, err := parseH2load(out.Bytes())
		if err != nil {
			t.Fatalf("h2load (%v): %v", werr, err)
		}
		return res
	}
}

// reportLost reads "report <generation> <cause> <method> <lost>".
func reportLost(t *testing.T, line string) int {
	t.Helper()
	f := regexp.MustCompile(`\S+`).FindAllString(line, -1)
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return n
}
