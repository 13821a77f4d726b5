package main

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// A contender is a server and its way of restarting. Its methods are called
// from one goroutine, inside the run's namespace.
type contender interface {
	// start starts the server on env.addr and returns once it serves.
	start(ctx context.Context, env *runEnv) error
	// restart restarts the server once, calling mark at the moment a
	// listener closes or changes hands, and returns once the new server
	// serves and the old one is gone (or draining, for nginx).
	restart(ctx context.Context, mark func(string)) error
	// stop ends every process the contender started.
	stop(ctx context.Context) error
}

// spec describes a contender for the table.
type spec struct {
	name       string
	migrateReq int    // net.ipv4.tcp_migrate_req in the run's namespace
	bpf        bool   // needs a bpf filesystem (worker.EnvBPF) for its pins
	about      string // how it restarts, one line
	make       func() contender
	// check, if set, says why the contender cannot run on this machine.
	check func() error
	// noTLS, if set, says why the contender has no TLS mode: its runs with
	// -tls or -h2 are skipped with it.
	noTLS string
	// h3 marks the contenders that serve HTTP/3, the ones -h3 runs;
	// h3Only those that serve nothing else (skipped without -h3).
	h3, h3Only bool
}

// runEnv is what a contender gets from the run.
type runEnv struct {
	addr      string   // 127.0.0.1:port to serve
	dir       string   // private directory, removed after the run
	workerBin string   // the binary run for workers (it calls worker.Main)
	stderr    *os.File // workers' stderr: a file, since upgraded processes inherit it
	extra     []string // environment of every worker (TLS certificate)
	gen       int      // last generation started
	bpfDir    string   // a bpf filesystem, for contenders that need one
	// certFile and keyFile are the run's certificate and key (PEM) when it
	// serves TLS, and clientTLS the client configuration that trusts only
	// that certificate; all unset in plain runs.
	certFile, keyFile string
	clientTLS         *tls.Config
	// tls sums the TLS handshakes the workers report at exit; readers
	// counts the goroutines reading workers' stdout (see readReady).
	tls     handshakeCount
	readers sync.WaitGroup
}

// handshakeCount is TLS handshakes served, full and resumed (the server's
// DidResume), as workers report them ("tls <pid> <full> <resumed>").
type handshakeCount struct {
	Full    atomic.Int64 `json:"-"`
	Resumed atomic.Int64 `json:"-"`
	// cpu follows the workers' CPU time ("ready <pid>", "cpu <pid> <ns>").
	cpu cpuTrack
	// quic sums the quic workers' reports ("quic <pid> ...").
	quic quicCount
}

// binFor returns the binary that runs worker mode: workerBin-mode if it
// exists (cmd/zdworker-steer beside cmd/zdworker), else workerBin.
func (e *runEnv) binFor(mode string) string {
	if b := e.workerBin + "-" + mode; isExec(b) {
		return b
	}
	return e.workerBin
}

// nextGen returns the next generation number, as a string.
func (e *runEnv) nextGen() string {
	e.gen++
	return strconv.Itoa(e.gen)
}

// specs lists every contender, in the order of the tables.
func specs() []spec {
	s := []spec{
		{name: "naive", about: "stop the process (Shutdown), start a new one that listens again",
			make: func() contender { return &naive{} }},
		{name: "reuseport-m0", about: "4 SO_REUSEPORT workers (net.ListenConfig + Control) rolled, plain Shutdown, tcp_migrate_req=0",
			make: func() contender { return &pool{mode: "reuseport", n: 4} }},
		{name: "reuseport-m1", migrateReq: 1, about: "the same with tcp_migrate_req=1",
			make: func() contender { return &pool{mode: "reuseport", n: 4} }},
		{name: "tableflip", about: "cloudflare/tableflip v1.2.3 upgrade, then plain Shutdown",
			make: func() contender { return &tableflipContender{} }},
	}
	s = append(s, nginxSpecs()...)
	s = append(s, haproxySpecs()...)
	s = append(s, caddySpecs()...)
	s = append(s, zerodropSpecs()...)
	return append(s, quicSpecs()...)
}

// naive restarts the way a process manager does: stop, then start.
type naive struct {
	env *runEnv
	cur *proc
}

func (c *naive) start(ctx context.Context, env *runEnv) (err error) {
	c.env = env
	c.cur, err = env.startWorker(ctx, "plain", env.nextGen(), nil)
	return err
}

func (c *naive) restart(ctx context.Context, mark func(string)) error {
	mark("restart")
	if err := c.cur.stop(ctx); err != nil {
		return err
	}
	next, err := c.env.startWorker(ctx, "plain", c.env.nextGen(), nil)
	if err != nil {
		return err
	}
	c.cur = next
	return nil
}

func (c *naive) stop(ctx context.Context) error { return c.cur.stop(ctx) }

// pool is n workers of one mode sharing the port with SO_REUSEPORT, rolled
// one at a time, round-robin: start the new worker, then stop the old one.
type pool struct {
	mode string
	n    int
	// slotEnv, if set, is the environment of the workers of slot i.
	slotEnv func(i int) []string
	env     *runEnv
	workers []*proc
	next    int
}

func (c *pool) start(ctx context.Context, env *runEnv) error {
	c.env = env
	c.workers = make([]*proc, c.n)
	errs := make([]error, c.n)
	var wg sync.WaitGroup
	for i := range c.n {
		gen := env.nextGen()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.workers[i], errs[i] = env.startWorker(ctx, c.mode, gen, c.envOf(i))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.stop(ctx)
		return err
	}
	return nil
}

func (c *pool) restart(ctx context.Context, mark func(string)) error {
	i := c.next % len(c.workers)
	c.next++
	p, err := c.env.startWorker(ctx, c.mode, c.env.nextGen(), c.envOf(i))
	if err != nil {
		return err
	}
	old := c.workers[i]
	c.workers[i] = p
	mark("roll")
	return old.stop(ctx)
}

func (c *pool) envOf(i int) []string {
	if c.slotEnv == nil {
		return nil
	}
	return c.slotEnv(i)
}

func (c *pool) stop(ctx context.Context) error {
	errs := make([]error, len(c.workers))
	var wg sync.WaitGroup
	for i, p := range c.workers {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = p.stop(ctx)
		}()
	}
	wg.Wait()
	c.workers = nil
	return errors.Join(errs...)
}
