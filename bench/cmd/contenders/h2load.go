package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The -h2load mode: h2load (nghttp2) ends a connection at its first GOAWAY
// and never retries a stream, so one h2load run straddles each restart:
// started h2loadLead before it, for h2loadRun.
const (
	h2loadLead    = 200 * time.Millisecond
	h2loadRun     = 500 * time.Millisecond
	h2loadTimeout = 30 * time.Second // one run, however loaded the machine
)

// h2loadResult is what the h2load runs of one benchmark run counted.
type h2loadResult struct {
	Connections int `json:"connections"` // per h2load run (-c)
	Streams     int `json:"streams"`     // concurrent streams per connection (-m)
	// Total sums every run's request line; Started - Done are the streams
	// in flight when a run's time was up, which h2load counts neither way.
	Total netnstest.H2load `json:"total"`
	// Failing are the runs with a failed stream, by restart (1-based).
	Failing []h2loadFailing `json:"failing,omitempty"`
}

// h2loadFailing is one h2load run with failed streams.
type h2loadFailing struct {
	Restart int              `json:"restart"`
	Counts  netnstest.H2load `json:"counts"`
	Output  string           `json:"output,omitempty"` // the first failing run's only
}

// h2loadArgs are the h2load arguments of a run of s against url: s.Concurrency
// streams in all, s.StreamsPerConn per connection, one thread.
func h2loadArgs(s runSpec, url string) (args []string, conns int) {
	conns = (s.Concurrency + s.StreamsPerConn - 1) / s.StreamsPerConn
	return []string{"-c", strconv.Itoa(conns), "-m", strconv.Itoa(s.StreamsPerConn), "-t", "1",
		"-D", fmt.Sprintf("%dms", h2loadRun.Milliseconds()), "--warm-up-time=0", url}, conns
}

// scheduleH2load restarts c s.Restarts times, each restart h2loadLead into an
// h2load run against url, waiting for the run to end and then s.Period
// before the next. It returns how long each restart took, in milliseconds,
// and what h2load counted.
func scheduleH2load(ctx context.Context, s runSpec, c contender, path, url string) ([]float64, *h2loadResult, error) {
	args, conns := h2loadArgs(s, url)
	res := &h2loadResult{Connections: conns, Streams: s.StreamsPerConn}
	var took []float64
	for n := 1; n <= s.Restarts; n++ {
		rctx, cancel := context.WithTimeout(ctx, h2loadTimeout)
		var out bytes.Buffer
		cmd := exec.CommandContext(rctx, path, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			cancel()
			return took, res, fmt.Errorf("h2load: %w", err)
		}
		rerr := sleep(ctx, h2loadLead)
		if rerr == nil {
			t0 := time.Now()
			if rerr = c.restart(ctx, func(string) {}); rerr == nil {
				took = append(took, float64(time.Since(t0).Microseconds())/1000)
			} else {
				rerr = fmt.Errorf("%s: restart %d: %w", s.Contender, n, rerr)
			}
		}
		werr := cmd.Wait() // by its PID; killed at rctx's end
		cancel()
		if rerr != nil {
			return took, res, rerr
		}
		got, err := netnstest.ParseH2load(out.Bytes())
		if err != nil {
			return took, res, fmt.Errorf("h2load run %d (%v): %w", n, werr, err)
		}
		res.Total.Add(got)
		if got.Failed > 0 {
			f := h2loadFailing{Restart: n, Counts: got}
			if len(res.Failing) == 0 {
				f.Output = out.String()
			}
			res.Failing = append(res.Failing, f)
		}
		if err := sleep(ctx, s.Period); err != nil {
			return took, res, err
		}
	}
	return took, res, nil
}
