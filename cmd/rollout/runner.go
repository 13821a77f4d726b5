package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// runnerMain runs inside the private network namespace: it brings lo up,
// runs every strategy in turn and prints the summary.
func runnerMain(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	var bpf bpfFS
	if slices.ContainsFunc(cfg.Strategies, func(n string) bool { return strategies[n].bpf }) {
		var cleanup func()
		if bpf.dir, cleanup, bpf.err = mountBPF(); bpf.err == nil {
			defer cleanup()
		}
	}
	sum, err := runAll(ctx, cfg, bpf, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rollout: %v\n", err)
		return exitError
	}
	if cfg.JSON {
		err = writeJSON(stdout, sum)
	} else {
		err = writeTable(stdout, sum)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rollout: %v\n", err)
		return exitError
	}
	for _, o := range sum.Strategies {
		if len(o.Errors) > 0 {
			return exitError
		}
	}
	if ctx.Err() != nil {
		return exitError
	}
	return exitOK
}

// bpfFS is the bpf filesystem the ebpf strategy pins its program in, or why
// there is none.
type bpfFS struct {
	dir string
	err error
}

// runAll prepares the namespace and runs each strategy.
func runAll(ctx context.Context, cfg config, bpf bpfFS, stderr io.Writer) (*summary, error) {
	if err := linux.LinkUp("lo"); err != nil {
		return nil, fmt.Errorf("bring up lo: %w", err)
	}
	// A new connection per request: give the clients every port there is.
	if err := linux.WriteSysctl("net.ipv4.ip_local_port_range", "1024 65535"); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	tty := isTerminal(stderr)
	stderr = &syncWriter{w: stderr}
	prog := &progress{w: stderr, tty: tty}
	sum := newSummary(cfg)
	for _, name := range cfg.Strategies {
		if ctx.Err() != nil {
			break
		}
		o := runStrategy(ctx, cfg, strategies[name], exe, bpf, stderr, prog)
		sum.Strategies = append(sum.Strategies, o)
	}
	return sum, nil
}

// runStrategy runs one strategy: servers up, load on, a restart every
// Duration/(Restarts+1), load off, servers down. Problems end up in Errors.
func runStrategy(ctx context.Context, cfg config, s *strategy, exe string, bpf bpfFS, stderr io.Writer, prog *progress) outcome {
	o := newOutcome(s, cfg)
	if s.bpf && bpf.err != nil {
		o.Skipped = bpf.err.Error()
		prog.done(o)
		return o
	}
	if err := linux.WriteSysctl(linux.MigrateReq, strconv.Itoa(s.migrateReq)); err != nil {
		o.Errors = append(o.Errors, err.Error())
		return o
	}
	dir, err := os.MkdirTemp("", "zerodrop-rollout-")
	if err != nil {
		o.Errors = append(o.Errors, err.Error())
		return o
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		o.Errors = append(o.Errors, err.Error())
		return o
	}
	f := &fleet{s: s, exe: exe, stderr: stderr, env: []string{
		envStrategy + "=" + s.name, envAddr + "=" + addr, envHandoff + "=" + filepath.Join(dir, "handoff.sock"),
		envBPF + "=" + bpf.dir,
	}}
	url, clientTLS := "http://"+addr+"/", (*tls.Config)(nil)
	if cfg.TLS {
		cert, err := netnstest.WriteCert(dir, 24*time.Hour)
		if err != nil {
			o.Errors = append(o.Errors, err.Error())
			return o
		}
		f.env = append(f.env, envCert+"="+cert.CertFile, envKey+"="+cert.KeyFile)
		url, clientTLS = "https://"+addr+"/", cert.Client()
	}
	if cfg.Metrics {
		f.env = append(f.env, envMetrics+"=1")
	}
	defer f.kill()
	if err := f.start(o.Workers); err != nil {
		o.Errors = append(o.Errors, "start: "+err.Error())
		return o
	}
	if cfg.Restarts > 0 { // the first successor (restart 1), ready before the load starts
		if err := f.prepare(1 % len(f.live)); err != nil {
			o.Errors = append(o.Errors, "start: "+err.Error())
			return o
		}
	}
	res, reports, kernel, err := drive(ctx, cfg, f, url, clientTLS, prog)
	if err != nil {
		o.Errors = append(o.Errors, err.Error())
	}
	o.Kernel = kernel
	if cfg.Metrics && err == nil {
		if o.Metrics, err = scrape(ctx, url+"metrics", clientTLS); err != nil {
			o.Errors = append(o.Errors, err.Error())
		}
	}
	if err := f.stop(); err != nil {
		o.Errors = append(o.Errors, err.Error())
	}
	o.fill(res, reports, cfg.Clients, cfg.Concurrency)
	prog.done(o)
	return o
}

// drive runs the load and rolls the servers while it runs. It returns the
// load's result, the reports of the servers it stopped, and the kernel
// counters' deltas while the load ran (read before it is stopped: clients
// abandoned then send resets that mean nothing).
func drive(ctx context.Context, cfg config, f *fleet, url string, clientTLS *tls.Config, prog *progress) (*load.Result, []workerReport, reuseport.Counters, error) {
	var delta reuseport.Counters
	before, berr := reuseport.ReadCounters()
	// The load lasts until the restarts are done and a steady tail has
	// passed (Duration, unless restarts fall behind on a loaded machine),
	// bounded by maxLoad.
	lc := load.Config{URL: url, TLS: clientTLS, Concurrency: cfg.Concurrency, Duration: maxLoad(cfg),
		Timeout: cfg.Timeout, Header: "X-Generation"}
	switch cfg.Clients {
	case clientsKeepAlive:
		lc.KeepAlive = true
	case clientsPool:
		lc.Pool = cfg.Concurrency
	}
	g, err := load.New(lc)
	if err != nil {
		return nil, nil, delta, err
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		res  *load.Result
		lerr error
		wg   sync.WaitGroup
	)
	loadDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(loadDone)
		res, lerr = g.Run(lctx)
	}()
	stopProg := prog.follow(f.s.name, cfg, g)
	reports, rerr := rollAll(ctx, cfg, f, g, loadDone, prog)
	after, aerr := reuseport.ReadCounters()
	if aerr == nil && berr == nil {
		delta = after.Sub(before)
	}
	// The requests in flight now are not counted; none is near a restart.
	cancel()
	wg.Wait()
	stopProg()
	switch {
	case ctx.Err() != nil:
		return res, reports, delta, errors.New("interrupted")
	case rerr != nil:
		return res, reports, delta, rerr
	case errors.Is(lerr, context.Canceled):
		return res, reports, delta, nil
	}
	return res, reports, delta, lerr
}

// maxLoad bounds the load of one strategy, however far restarts fall behind.
func maxLoad(cfg config) time.Duration { return 3*cfg.Duration + 30*time.Second }

// rollAll makes cfg.Restarts restarts while the load runs, at multiples of
// Duration/(Restarts+1) from the start, each at least half that after the
// previous one ended, then lets the load run until Duration, or for a steady
// tail of the same half interval, whichever is later.
func rollAll(ctx context.Context, cfg config, f *fleet, g *load.Generator, loadDone <-chan struct{}, prog *progress) ([]workerReport, error) {
	interval := cfg.Duration / time.Duration(cfg.Restarts+1)
	start := time.Now()
	t := time.NewTimer(interval)
	defer t.Stop()
	var reports []workerReport
	for i := 1; i <= cfg.Restarts+1; i++ {
		select {
		case <-ctx.Done():
			return reports, ctx.Err()
		case <-loadDone:
			// maxLoad has passed: the outcome says how many were done.
			return reports, nil
		case <-t.C:
		}
		if i > cfg.Restarts {
			return reports, nil // the tail is over
		}
		rep, err := f.roll(i, func() { g.Mark("restart") }, i < cfg.Restarts)
		if rep != nil {
			reports = append(reports, *rep)
		}
		if err != nil {
			return reports, fmt.Errorf("restart %d: %w", i, err)
		}
		prog.restarted(i)
		// The next slot, but at least half an interval of steady load.
		t.Reset(max(interval/2, time.Until(start.Add(time.Duration(i+1)*interval))))
	}
	return reports, nil
}

// freeAddr returns a free loopback address of the namespace.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// syncWriter serialises writes: the workers' stderr and the progress line
// share it.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
