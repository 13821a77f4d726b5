package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// zerodropSpecs are the zerodrop strategies.
func zerodropSpecs() []spec {
	return []spec{
		{name: "zd-drain", migrateReq: 1,
			about: "zerodrop: 4 reuseport workers rolled, tcp_migrate_req=1, drain.Server.Shutdown",
			make:  func() contender { return &pool{mode: "drain", n: 4} }},
		{name: "zd-handoff",
			about: "zerodrop: one process upgraded by handoff (fds over a unix socket), then drain.Server.Shutdown",
			make:  func() contender { return &handoffContender{} }},
		{name: "zd-systemd",
			about: "zerodrop: systemd fd-store restart (handoff/systemd; the harness plays systemd): stop, start with the stored listener",
			make:  func() contender { return &systemdContender{} }},
		{name: "zd-steer", bpf: true,
			about: "zerodrop: 4 reuseport workers in a reuseport/steer eBPF group, tcp_migrate_req=0, drain.Server steering away",
			make:  func() contender { return &pool{mode: "steer", n: 4} }},
	}
}

func init() {
	workerModes["drain"] = serveDrain
	workerModes["handoff"] = serveHandoff
	workerModes["steer"] = serveSteer
}

// serveSteer is a reuseport worker (migration off) in the eBPF group of
// package reuseport/steer: on stop, drain.Server marks it draining (the
// program sends new connections elsewhere), accepts until its queue is empty,
// and closes; the program migrates what the close still leaves.
func serveSteer(ctx context.Context, w *worker) error {
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, SkipUIDCheck: true}
	ln, err := cfg.Listen(ctx, "tcp", w.addr)
	if err != nil {
		return err
	}
	m, err := (&steer.Config{Dir: os.Getenv(envBPF)}).Join(ctx, ln)
	if err != nil {
		ln.Close()
		return err
	}
	defer m.Close() // after the listener: the program needs the member until then
	return w.serveDrained(ln, func() error { return nil }, ctx.Done(), drain.Options{Steerer: m.Group()})
}

// serveDrain is a reuseport worker (migration required) stopped by
// drain.Server: the listener stops first, its queue migrating to the
// siblings, every accepted request is served, then Shutdown.
func serveDrain(ctx context.Context, w *worker) error {
	cfg := reuseport.Config{Migration: reuseport.MigrationRequire, SkipUIDCheck: true}
	ln, err := cfg.Listen(ctx, "tcp", w.addr)
	if err != nil {
		return err
	}
	return w.serveDrained(ln, func() error { return nil }, ctx.Done())
}

// serveHandoff inherits its listener from its predecessor over the handoff
// socket (or creates it, the first time), serves, calls Ready, and drains
// once its successor is ready. The socket itself never closes.
func serveHandoff(ctx context.Context, w *worker) error {
	u, err := handoff.New(ctx, handoff.Config{Path: filepath.Join(w.dir, "handoff.sock")})
	if err != nil {
		return err
	}
	defer u.Close()
	w.gen = "h" + strconv.FormatUint(u.Generation(), 10)
	ln, err := u.Listen(ctx, "http", "tcp", w.addr)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-u.Exit():
		case <-ctx.Done():
		}
		close(stop)
	}()
	return w.serveDrained(ln, u.Ready, stop)
}

// serveDrained serves ln with a drain.Server, calls ready, says it is ready,
// and drains when stop closes.
func (w *worker) serveDrained(ln net.Listener, ready func() error, stop <-chan struct{}, opts ...drain.Options) error {
	ds := &drain.Server{HTTP: newServer(w)}
	if len(opts) > 0 {
		ds.Listener = opts[0]
	}
	errc := make(chan error, 1)
	go func() { errc <- ds.Serve(ln) }()
	if err := ready(); err != nil {
		ds.Shutdown(context.Background())
		<-errc
		return fmt.Errorf("ready: %w", err)
	}
	w.ready()
	select {
	case <-stop:
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_, err := ds.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// handoffContender is one process upgraded with package handoff: a restart
// starts the successor, which takes the listener over and calls Ready; the
// predecessor then drains and exits.
type handoffContender struct {
	env *runEnv
	cur *proc
}

func (c *handoffContender) start(ctx context.Context, env *runEnv) (err error) {
	c.env = env
	c.cur, err = env.startWorker(ctx, "handoff", "", nil)
	return err
}

func (c *handoffContender) restart(ctx context.Context, mark func(string)) error {
	next, err := c.env.startWorker(ctx, "handoff", "", nil)
	if err != nil {
		return err
	}
	mark("handoff") // next is Ready: the predecessor is stopping
	old := c.cur
	c.cur = next
	return old.wait(ctx)
}

func (c *handoffContender) stop(ctx context.Context) error { return c.cur.stop(ctx) }
