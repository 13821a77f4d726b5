package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
	"golang.org/x/sys/unix"
)

// strategy is one way of restarting servers.
type strategy struct {
	name string
	// migrateReq is written to net.ipv4.tcp_migrate_req before the run.
	migrateReq int
	// single: one server process upgraded in place (its successor takes
	// over by itself) instead of a group of workers rolled one by one.
	single bool
	// bpf: the strategy loads an eBPF program and needs a bpf filesystem.
	bpf bool
	// serve runs one server until told to stop, then stops it.
	serve func(ctx context.Context, w worker) (workerReport, error)
}

// strategies are all the known strategies, by name; order gives the run order.
var strategies = map[string]*strategy{
	"close":   {name: "close", migrateReq: 0, serve: serveClose},
	"migrate": {name: "migrate", migrateReq: 1, serve: serveMigrate},
	"handoff": {name: "handoff", migrateReq: 0, single: true, serve: serveHandoff},
	"ebpf":    {name: "ebpf", migrateReq: 0, bpf: true, serve: serveEBPF},
	"cpu":     {name: "cpu", migrateReq: 0, serve: serveCPU},
}

var order = []string{"close", "migrate", "handoff", "ebpf", "cpu"}

// strategyNames lists every strategy in run order.
func strategyNames() []string { return slices.Clone(order) }

// defaultStrategies lists the strategies run unless --strategies says
// otherwise: all of them (ebpf is skipped without root).
func defaultStrategies() []string { return strategyNames() }

// serveClose is what most Go servers do today: SO_REUSEPORT set through
// net.ListenConfig (Go's defaults otherwise, so MPTCP since Go 1.24), and
// http.Server.Shutdown on SIGTERM.
func serveClose(ctx context.Context, w worker) (workerReport, error) {
	rep := workerReport{Generation: w.gen, Method: "http.Server.Shutdown"}
	lc := net.ListenConfig{Control: setReusePort}
	ln, err := lc.Listen(ctx, "tcp4", w.addr)
	if err != nil {
		return rep, err
	}
	srv, err := newServer(w.gen)
	if err != nil {
		ln.Close()
		return rep, err
	}
	errc := make(chan error, 1)
	go func() { errc <- serveHTTP(srv, ln) }()
	w.ready(w.gen)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return rep, fmt.Errorf("serve: %w", err)
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	rep.TookMS = msSince(start)
	return rep, err
}

// setReusePort is the Control function found in most code bases.
func setReusePort(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	})
	if err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt SO_REUSEPORT", serr)
}

// serveMigrate is zerodrop's way for a group of workers: a reuseport
// listener (plain TCP) with tcp_migrate_req=1, and drain.Server on SIGTERM,
// whose listener stop moves the accept queue to the siblings.
func serveMigrate(ctx context.Context, w worker) (workerReport, error) {
	rep := workerReport{Generation: w.gen}
	cfg := reuseport.Config{Migration: reuseport.MigrationRequire}
	ln, err := cfg.Listen(ctx, "tcp4", w.addr)
	if err != nil {
		return rep, err
	}
	ds := &drain.Server{}
	ready := func() error { w.ready(w.gen); return nil }
	return serveDrained(ds, w.gen, ln, ready, ctx.Done(), rep)
}

// serveEBPF steers instead of migrating: reuseport listeners with
// tcp_migrate_req=0 that join an SK_REUSEPORT program's group
// (reuseport/steer). drain.Server marks the stopping worker Draining (no new
// connections reach it), accepts until its queue is empty, and closes; what
// the close still leaves behind the program migrates to a live member.
func serveEBPF(ctx context.Context, w worker) (workerReport, error) {
	rep := workerReport{Generation: w.gen}
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	ln, err := cfg.Listen(ctx, "tcp4", w.addr)
	if err != nil {
		return rep, err
	}
	m, err := (&steer.Config{Dir: w.bpfDir}).Join(ctx, ln)
	if err != nil {
		ln.Close()
		return rep, err
	}
	defer m.Close() // after the listener: the program needs the member's class until then
	ds := &drain.Server{Listener: drain.Options{Steerer: m.Group()}}
	ready := func() error { w.ready(w.gen); return nil }
	return serveDrained(ds, w.gen, ln, ready, ctx.Done(), rep)
}

// serveCPU steps out instead of steering, with no privilege: reuseport
// listeners with SO_INCOMING_CPU and tcp_migrate_req=0. The worker of slot s
// takes online CPU s modulo the CPUs, as its successor will, so that a group
// of at least as many workers as CPUs covers every CPU, also while one
// drains. drain.Server with StepOut clears the stopping worker's CPU, so
// that (Linux 6.1+) the kernel gives it no new connection, waits out its
// handshakes, accepts what is queued and closes.
func serveCPU(ctx context.Context, w worker) (workerReport, error) {
	rep := workerReport{Generation: w.gen}
	cpus, err := reuseport.OnlineCPUs()
	if err != nil {
		return rep, err
	}
	cpu := cpus[w.slot%len(cpus)]
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, Options: reuseport.Options{IncomingCPU: &cpu}}
	ln, err := cfg.Listen(ctx, "tcp4", w.addr)
	if err != nil {
		return rep, err
	}
	ds := &drain.Server{Listener: drain.Options{StepOut: true}}
	ready := func() error { w.ready(w.gen); return nil }
	return serveDrained(ds, w.gen, ln, ready, ctx.Done(), rep)
}

// serveHandoff is one server upgraded in place: it inherits its listener
// from its predecessor through the handoff socket (or creates it, the first
// time), serves, calls Ready, and drains once its successor is ready. The
// socket never closes, so nothing queued in it is lost.
func serveHandoff(ctx context.Context, w worker) (workerReport, error) {
	rep := workerReport{}
	// The successor is started ahead of its restart and waits for it.
	u, err := handoff.New(ctx, handoff.Config{Path: w.handoff, ReadyTimeout: 15 * time.Minute})
	if err != nil {
		return rep, err
	}
	defer u.Close()
	gen := int(u.Generation())
	rep.Generation = gen
	ln, err := u.Listen(ctx, "http", "tcp4", w.addr)
	if err != nil {
		return rep, err
	}
	// Idle keep-alive connections go to the successor, which serves those
	// its predecessor passes; over TLS, TLS 1.3 ones with their session
	// (drain.Server.TLSHandOver: the client sees no new handshake).
	ds := &drain.Server{TLSHandOver: os.Getenv(envCert) != ""}
	{
		if err := u.HandleConns("http", func(pc handoff.PassedConn) { ds.ServeConn(pc.Conn, pc.State) }); err != nil {
			ln.Close()
			return rep, err
		}
		ds.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
			if !u.TakesConns("http") {
				return 0, handoff.ErrNotTaken
			}
			pcs := make([]handoff.PassedConn, len(conns))
			for i, d := range conns {
				pcs[i] = handoff.PassedConn{Listener: "http", Conn: d.Conn, State: d.Unread}
			}
			return u.PassConns(ctx, pcs)
		}
	}
	ready := func() error {
		w.ready(gen) // serving the inherited socket, next to the predecessor
		return w.takeOver(u.Ready)
	}
	// A SIGTERM also stops it (at the end of the run): then it is the last
	// holder and the drain accepts what is queued.
	stop := make(chan struct{})
	go func() {
		select {
		case <-u.Exit():
		case <-ctx.Done():
		}
		close(stop)
	}()
	return serveDrained(ds, gen, ln, ready, stop, rep)
}

// serveDrained serves ds on ln with generation gen's http.Server (over TLS
// when it has a TLSConfig), calls ready once Serve runs, and drains ds when
// stop closes (or at once if ready fails), filling rep from the drain report.
func serveDrained(ds *drain.Server, gen int, ln net.Listener, ready func() error, stop <-chan struct{}, rep workerReport) (workerReport, error) {
	srv, err := newServer(gen)
	if err != nil {
		ln.Close()
		return rep, err
	}
	ds.HTTP = srv
	errc := make(chan error, 1)
	// Chosen before a handed-over connection can reach ds: the Serve
	// ServeConn runs gives a server without a TLSConfig an empty one.
	serve := ds.Serve
	if srv.TLSConfig != nil {
		serve = func(l net.Listener) error { return ds.ServeTLS(l, "", "") }
	}
	go func() { errc <- serve(ln) }()
	rerr := ready()
	if rerr == nil {
		select {
		case <-stop:
		case err := <-errc:
			return rep, fmt.Errorf("serve: %w", err)
		}
	}
	<-ds.Serving() // a Shutdown before Serve has the listener would not drain it
	sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	r, err := ds.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if rerr != nil && !errors.Is(rerr, context.Canceled) { // canceled: stopped before its turn
		err = fmt.Errorf("ready: %w", rerr)
	}
	if r != nil {
		rep.Drained = true
		rep.Method, rep.Why, rep.Steered = string(r.Method), r.Why, r.Steered
		rep.Queued, rep.Migrated, rep.Accepted, rep.Remainder = r.QueuedAtStop, r.Migrated, r.Accepted, r.Remainder
		rep.Errors = append(rep.Errors, r.Errors...)
		if r.HTTP != nil {
			rep.Forced = len(r.HTTP.Forced)
			rep.TookMS = float64(r.HTTP.Took.Microseconds()) / 1000
		}
	}
	return rep, err
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
