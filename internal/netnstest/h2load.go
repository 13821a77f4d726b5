package netnstest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// H2load is h2load's request line: "requests: N total, N started, N done,
// N succeeded, N failed, N errored, N timeout". Failed counts every stream
// without a 2xx answer; Errored those of them that failed below HTTP (for
// example a stream h2load refused itself because a GOAWAY came first);
// Timeout those whose connection timed out. Started minus Done is the
// streams still in flight when a timed run (-D) ended, which h2load counts
// neither way.
type H2load struct {
	Started, Done, Succeeded, Failed, Errored, Timeout int
}

// Add adds r's counts to h's.
func (h *H2load) Add(r H2load) {
	h.Started += r.Started
	h.Done += r.Done
	h.Succeeded += r.Succeeded
	h.Failed += r.Failed
	h.Errored += r.Errored
	h.Timeout += r.Timeout
}

func (h H2load) String() string {
	return fmt.Sprintf("%d started, %d done, %d succeeded, %d failed, %d errored, %d timeout", h.Started, h.Done, h.Succeeded, h.Failed, h.Errored, h.Timeout)
}

var h2loadLine = regexp.MustCompile(`requests: \d+ total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)

// ParseH2load reads h2load's output.
func ParseH2load(out []byte) (H2load, error) {
	m := h2loadLine.FindSubmatch(out)
	if m == nil {
		return H2load{}, fmt.Errorf("no requests line in h2load's output %q", out)
	}
	var n [6]int
	for i := range n {
		n[i], _ = strconv.Atoi(string(m[i+1]))
	}
	return H2load{n[0], n[1], n[2], n[3], n[4], n[5]}, nil
}

// H2loadPath is h2load's path; it fails tb if h2load is not installed.
func H2loadPath(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("h2load")
	if err != nil {
		tb.Fatalf("this test needs h2load (apt-get install nghttp2-client; .ci/run does): %v", err)
	}
	return p
}

// StartH2load runs h2load (at path h2load) on url for d (at least 1 ms):
// 8 connections with up to 16 streams each, one thread, no warm-up. It
// returns a func that waits for it (it is killed after a minute) and parses
// its figures. h2load ends a connection at its first GOAWAY, so one run
// straddles one stop.
func StartH2load(tb testing.TB, h2load, url string, d time.Duration) func() H2load {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var out bytes.Buffer
	dur := fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
	cmd := exec.CommandContext(ctx, h2load, "-c", "8", "-m", "16", "-t", "1", "-D", dur, "--warm-up-time=0", url)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatal(err)
	}
	return func() H2load {
		tb.Helper()
		defer cancel()
		werr := cmd.Wait()
		res, err := ParseH2load(out.Bytes())
		if err != nil {
			tb.Fatalf("h2load (%v): %v", werr, err)
		}
		return res
	}
}
