package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudflare/tableflip"
)

// serveTableflip serves with github.com/cloudflare/tableflip: on SIGHUP the
// process upgrades itself (the new process inherits the listening socket and
// signals readiness), then shuts down with http.Server.Shutdown.
func serveTableflip(ctx context.Context, w *worker) error {
	upg, err := tableflip.New(tableflip.Options{
		UpgradeTimeout: 10 * time.Second,
		PIDFile:        filepath.Join(w.dir, "tableflip.pid"),
	})
	if err != nil {
		return err
	}
	defer upg.Stop()
	ln, err := upg.Listen("tcp", w.addr)
	if err != nil {
		return err
	}
	srv := newServer(w)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if err := upg.Ready(); err != nil {
		srv.Close()
		<-done
		return err
	}
	w.ready()
	for {
		select {
		case <-w.sigs:
			// A process refuses to upgrade until it has seen its parent exit.
			wctx, cancel := context.WithTimeout(ctx, readyTimeout)
			err := upg.WaitForParent(wctx)
			cancel()
			if err == nil {
				err = upg.Upgrade()
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "tableflip %d: upgrade: %v\n", os.Getpid(), err)
			}
		case <-upg.Exit():
			return shutdown(srv, done)
		case <-ctx.Done():
			return shutdown(srv, done)
		case err := <-done:
			return fmt.Errorf("serve: %w", err)
		}
	}
}

// tableflipContender is one process upgraded in place by tableflip: a restart
// sends SIGHUP and waits for the new process to be ready and the old one to
// exit.
type tableflipContender struct {
	env *runEnv
	cur *proc
}

func (c *tableflipContender) start(ctx context.Context, env *runEnv) error {
	c.env = env
	p, err := env.startWorker(ctx, "tableflip", "", nil)
	c.cur = p
	return err
}

func (c *tableflipContender) restart(ctx context.Context, mark func(string)) error {
	old := c.cur
	mark("upgrade")
	if err := old.signal(sigHUP); err != nil {
		return err
	}
	pid, err := old.nextReady(ctx)
	if err != nil {
		return err
	}
	if err := old.wait(ctx); err != nil {
		return err
	}
	// The new process is a child of the old one; with the old one gone, it is
	// this namespace's init's (ours) to wait for.
	next, err := old.adopt(pid)
	if err != nil {
		return err
	}
	c.cur = next
	return nil
}

func (c *tableflipContender) stop(ctx context.Context) error { return c.cur.stop(ctx) }
