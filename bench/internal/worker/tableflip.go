package worker

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
			wctx, cancel := context.WithTimeout(ctx, parentTimeout)
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
