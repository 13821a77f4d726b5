// Package flipworker adds the worker mode "tableflip" (a server upgraded by
// github.com/cloudflare/tableflip) to the binaries that link it: cmd/contenders
// and cmd/zdworker-tableflip. It is apart so that other workers do not link
// tableflip.
package flipworker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cloudflare/tableflip"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
)

// serveTableflip serves with github.com/cloudflare/tableflip: on SIGHUP the
// process upgrades itself (the new process inherits the listening socket and
// signals readiness), then shuts down with http.Server.Shutdown.
func init() { worker.Register("tableflip", serveTableflip) }

// parentTimeout bounds a tableflip worker's wait for its parent to exit
// before it upgrades (the harness's readyTimeout).
const parentTimeout = 10 * time.Second

func serveTableflip(ctx context.Context, w *worker.Worker) error {
	upg, err := tableflip.New(tableflip.Options{
		UpgradeTimeout: 10 * time.Second,
		PIDFile:        filepath.Join(w.Dir, "tableflip.pid"),
	})
	if err != nil {
		return err
	}
	defer upg.Stop()
	ln, err := upg.Listen("tcp", w.Addr)
	if err != nil {
		return err
	}
	srv := w.NewServer()
	done := make(chan error, 1)
	go func() { done <- w.Serve(srv, ln) }()
	if err := upg.Ready(); err != nil {
		srv.Close()
		<-done
		return err
	}
	w.Ready()
	for {
		select {
		case <-w.Sigs:
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
			return worker.Shutdown(srv, done)
		case <-ctx.Done():
			return worker.Shutdown(srv, done)
		case err := <-done:
			return fmt.Errorf("serve: %w", err)
		}
	}
}
