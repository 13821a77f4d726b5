package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// benchPort is the port every contender serves in its namespace.
const benchPort = 8080

// runSpec is one run: a contender at a concurrency, restarted on a schedule.
type runSpec struct {
	Contender   string        `json:"contender"`
	Concurrency int           `json:"concurrency"`
	Rep         int           `json:"rep"`
	Restarts    int           `json:"restarts"`  // asked for
	Period      time.Duration `json:"period_ns"` // between restarts
	Lead        time.Duration `json:"lead_ns"`   // steady load before the first
	Tail        time.Duration `json:"tail_ns"`   // steady load after the last
	Window      time.Duration `json:"window_ns"` // around a mark
	Timeout     time.Duration `json:"timeout_ns"`
	KeepAlive   bool          `json:"keepalive"`
}

// duration is how long the load runs.
func (s runSpec) duration() time.Duration {
	return s.Lead + time.Duration(s.Restarts)*s.Period + s.Tail
}

// runResult is what one run measured.
type runResult struct {
	Spec     runSpec            `json:"spec"`
	Restarts int                `json:"restarts"` // done
	Counters reuseport.Counters `json:"counters"` // deltas over the run
	Load     *load.Result       `json:"load,omitempty"`
	Skipped  string             `json:"skipped,omitempty"`
	Error    string             `json:"error,omitempty"`
}

// findSpec returns the contender named name.
func findSpec(name string) (spec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// runOne runs s in the current namespaces, which it configures: call it in a
// fresh network namespace. Worker output goes to stderr.
func runOne(ctx context.Context, s runSpec, stderr *os.File) runResult {
	res := runResult{Spec: s}
	sp, ok := findSpec(s.Contender)
	if !ok {
		res.Error = fmt.Sprintf("no contender %q", s.Contender)
		return res
	}
	if sp.check != nil {
		if err := sp.check(); err != nil {
			res.Skipped = err.Error()
			return res
		}
	}
	if err := setupNamespace(sp.migrateReq); err != nil {
		res.Error = err.Error()
		return res
	}
	if err := measure(ctx, sp, &res, stderr); err != nil {
		res.Error = err.Error()
	}
	return res
}

// measure starts the contender, loads it while restarting it, and stops it.
func measure(ctx context.Context, sp spec, res *runResult, stderr *os.File) error {
	s := res.Spec
	dir, err := os.MkdirTemp("", "contenders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	env := &runEnv{addr: "127.0.0.1:" + strconv.Itoa(benchPort), dir: dir, self: self, stderr: stderr}
	if sp.bpf {
		if env.bpfDir, err = mountBPF(dir); err != nil {
			return fmt.Errorf("%s: %w", sp.name, err)
		}
		defer unix.Unmount(env.bpfDir, unix.MNT_DETACH)
	}
	c := sp.make()
	if err := c.start(ctx, env); err != nil {
		return fmt.Errorf("%s: start: %w", sp.name, err)
	}
	g, err := load.New(load.Config{URL: "http://" + env.addr + "/", Concurrency: s.Concurrency,
		Duration: s.duration(), Timeout: s.Timeout, KeepAlive: s.KeepAlive, Header: "X-Generation",
		Window: s.Window})
	if err != nil {
		c.stop(ctx)
		return err
	}
	before, err := reuseport.ReadCounters()
	if err != nil {
		c.stop(ctx)
		return err
	}
	type ran struct {
		r   *load.Result
		err error
	}
	done := make(chan ran, 1)
	start := time.Now()
	go func() { r, err := g.Run(ctx); done <- ran{r, err} }()
	n, rerr := schedule(ctx, start, s, c, g.Mark)
	out := <-done
	after, cerr := reuseport.ReadCounters()
	serr := c.stop(ctx)
	res.Restarts, res.Load, res.Counters = n, out.r, after.Sub(before)
	for _, err := range []error{rerr, out.err, cerr, serr} {
		if err != nil {
			return err
		}
	}
	return nil
}

// schedule restarts c every s.Period after s.Lead, s.Restarts times at most,
// and never after the last restart's slot: a restart that overruns delays
// the next ones, and those left when the slots run out are not done.
func schedule(ctx context.Context, start time.Time, s runSpec, c contender, mark func(string)) (int, error) {
	end := start.Add(s.Lead + time.Duration(s.Restarts)*s.Period)
	t := time.NewTimer(0)
	defer t.Stop()
	n := 0
	for ; n < s.Restarts; n++ {
		at := start.Add(s.Lead + time.Duration(n)*s.Period)
		t.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-t.C:
		}
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if !time.Now().Before(end) {
			break
		}
		if err := c.restart(ctx, mark); err != nil {
			return n, fmt.Errorf("%s: restart %d: %w", s.Contender, n+1, err)
		}
	}
	return n, nil
}
