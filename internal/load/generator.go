package load

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Generator sends the load one Config describes. Its methods are safe for
// concurrent use: Mark and Count are meant to be called while Run runs.
type Generator struct {
	cfg    Config
	client client // nil with Config.Pool
	pool   *pool  // nil without Config.Pool
	n      counts
	rec    *recorder
	ran    atomic.Bool
	sent   atomic.Int64 // requests started, for Config.Requests
	start  time.Time
}

// counts is what a run counts of its connections and requests, besides
// the recorder's latencies: the Result fields of the same names.
type counts struct {
	dials, retried, serverClosed, clientClosed, askedClose atomic.Int64
	// stopped: the run stopped sending (Config.Duration ended, or its
	// requests have); the closes that follow are the run's end (a request
	// cut short, the idle connections closed), not counted in
	// clientClosed.
	stopped atomic.Bool
}

// New checks cfg and returns a Generator ready to Run once.
func New(cfg Config) (*Generator, error) {
	cfg, u, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	g := &Generator{rec: newRecorder(cfg.Bucket, cfg.Window)}
	dial := cfg.Dial
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		g.n.dials.Add(1)
		c, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c, n: &g.n}, nil
	}
	g.cfg = cfg
	if cfg.Pool > 0 {
		g.pool = newPool(cfg, u, &g.n)
	} else {
		g.client = newClient(cfg, u, &g.n)
	}
	return g, nil
}

// Mark records an event, such as "restart", at the current time of the run.
// Marks made before Run starts count as made at its start; marks made after
// Run returns are ignored.
func (g *Generator) Mark(name string) { g.rec.mark(name) }

// Count returns how many requests have completed so far, and how many of them
// failed; for progress reports.
func (g *Generator) Count() (requests, failed int64) { return g.rec.count() }

// Run sends the load and returns what it measured. It stops sending after
// Config.Duration or Config.Requests, then waits for the requests in flight,
// each bounded by Config.Timeout. If ctx ends first, Run abandons the requests
// in flight without counting them and returns the result so far with
// ctx.Err(). Every goroutine Run starts has ended when it returns, except
// those net/http's Transport keeps for connections it is closing.
func (g *Generator) Run(ctx context.Context) (*Result, error) {
	if !g.ran.CompareAndSwap(false, true) {
		return nil, errors.New("load: Run called twice")
	}
	g.start = time.Now()
	g.rec.start(g.start, func() time.Duration { return time.Since(g.start) })
	sending, cancel := context.WithTimeout(ctx, g.cfg.Duration)
	defer cancel()
	context.AfterFunc(sending, func() { g.n.stopped.Store(true) })

	var wg sync.WaitGroup
	switch {
	case g.pool != nil:
		g.poolLoop(ctx, sending, &wg)
	case g.cfg.Rate > 0:
		g.openLoop(ctx, sending, &wg)
	default:
		g.closedLoop(ctx, sending, &wg)
	}
	wg.Wait()
	g.n.stopped.Store(true) // Config.Requests sent, or sending's end
	if g.pool != nil {
		g.pool.close()
	} else {
		g.client.close()
	}
	res := g.rec.result()
	res.Pool, res.Dials, res.Retried = g.cfg.Pool, g.n.dials.Load(), g.n.retried.Load()
	res.ServerClosed, res.ClientClosed, res.AskedClose = g.n.serverClosed.Load(), g.n.clientClosed.Load(), g.n.askedClose.Load()
	if ended(ctx) {
		<-ctx.Done() // its deadline has passed: the timer is about to fire
		return res, ctx.Err()
	}
	return res, nil
}

// closedLoop starts the workers: each sends its next request when the last
// one ends, while sending lasts.
func (g *Generator) closedLoop(ctx, sending context.Context, wg *sync.WaitGroup) {
	for range g.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !ended(sending) && g.take() {
				at := time.Since(g.start)
				g.one(ctx, g.rec.begin(at), at, g.client.do)
			}
		}()
	}
}

// waitUntil waits, on t, until due after the start; false if sending ended
// first.
func (g *Generator) waitUntil(sending context.Context, t *time.Timer, due time.Duration) bool {
	wait := due - time.Since(g.start)
	if wait <= 0 {
		return true
	}
	t.Reset(wait)
	select {
	case <-sending.Done():
		return false
	case <-t.C:
		return true
	}
}

// openLoop sends requests at Config.Rate while sending lasts, each in its own
// goroutine, at most Config.Concurrency at once. It returns when the last one
// has started.
func (g *Generator) openLoop(ctx, sending context.Context, wg *sync.WaitGroup) {
	slots := make(chan struct{}, g.cfg.Concurrency)
	interval := time.Duration(float64(time.Second) / g.cfg.Rate)
	t := time.NewTimer(0)
	defer t.Stop()
	for n := time.Duration(0); g.take(); n++ {
		due := n * interval
		if !g.waitUntil(sending, t, due) {
			return
		}
		if ended(sending) {
			return
		}
		i := g.rec.begin(due)
		select {
		case slots <- struct{}{}:
		case <-sending.Done():
			g.rec.abort(i)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.one(ctx, i, due, g.client.do)
			<-slots
		}()
	}
}

// take reports whether another request may be sent under Config.Requests.
func (g *Generator) take() bool {
	return g.cfg.Requests == 0 || g.sent.Add(1) <= g.cfg.Requests
}

// one sends a request with do, begun in bucket i at offset at, and records
// it unless ctx ended.
func (g *Generator) one(ctx context.Context, i int, at time.Duration, do func(context.Context) (string, error)) {
	rctx, cancel := context.WithTimeout(ctx, g.cfg.Timeout)
	hv, err := do(rctx)
	cancel()
	if ended(ctx) {
		g.rec.abort(i)
		return
	}
	g.rec.done(i, time.Since(g.start)-at, Classify(err), hv, err)
}

// ended reports whether ctx is done or past its deadline: its timer may fire
// late, and requests must not start, nor count, in between.
func ended(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
}

// watchedConn counts in serverClosed a connection on which a read failed
// (EOF, a reset) before the client closed it: the server closed it; and in
// clientClosed one the client closed first, before the run stopped
// sending: net/http's Transport does after a response that said
// Connection: close (counted in askedClose too), and on its own (for
// example when its write goroutine, starved of CPU, has not reported
// within 50 ms).
type watchedConn struct {
	net.Conn
	n              *counts
	closed, failed atomic.Bool
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !c.closed.Load() && c.failed.CompareAndSwap(false, true) {
		c.n.serverClosed.Add(1)
	}
	return n, err
}

func (c *watchedConn) Close() error {
	if !c.closed.Swap(true) && !c.failed.Load() && !c.n.stopped.Load() {
		c.n.clientClosed.Add(1)
	}
	return c.Conn.Close()
}
