package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

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
	m, err := (&steer.Config{Dir: os.Getenv(EnvBPF)}).Join(ctx, ln)
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

// serveSystemd is a service restarted by systemd with its listener in the fd
// store: it takes the listener from LISTEN_FDS (or creates it, the first
// time), stores it (FDSTORE=1), says READY=1, and on SIGTERM drains with
// drain.Server, which closes only its own reference.
func serveSystemd(ctx context.Context, w *worker) error {
	act, err := systemd.Activated()
	if err != nil {
		return err
	}
	cfg := &reuseport.Config{Migration: reuseport.MigrationIgnore, SkipUIDCheck: true}
	var ln net.Listener
	if act == nil {
		ln, err = cfg.Listen(ctx, "tcp", w.addr)
	} else {
		defer act.Close()
		ln, err = act.Listener(ctx, "http", "tcp", "", cfg)
	}
	if err != nil {
		return err
	}
	n := systemd.FromEnv()
	if err := n.Store("http", ln.(syscall.Conn)); err != nil {
		ln.Close()
		return err
	}
	return w.serveDrained(ln, func() error { return n.Ready("") }, ctx.Done())
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
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	_, err := ds.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
