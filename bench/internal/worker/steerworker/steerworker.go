// Package steerworker adds the worker mode "steer" (package reuseport/steer's
// eBPF group) to the binaries that link it: cmd/contenders and
// cmd/zdworker-steer. It is apart so that other workers do not link the eBPF
// library, whose package init would sit in their every start.
package steerworker

import (
	"context"
	"os"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

func init() { worker.Register("steer", serveSteer) }

// serveSteer is a reuseport worker (migration off) in the eBPF group of
// package reuseport/steer: on stop, drain.Server marks it draining (the
// program sends new connections elsewhere), accepts until its queue is empty,
// and closes; the program migrates what the close still leaves.
func serveSteer(ctx context.Context, w *worker.Worker) error {
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, SkipUIDCheck: true}
	ln, err := cfg.Listen(ctx, "tcp", w.Addr)
	if err != nil {
		return err
	}
	m, err := (&steer.Config{Dir: os.Getenv(worker.EnvBPF)}).Join(ctx, ln)
	if err != nil {
		ln.Close()
		return err
	}
	defer m.Close() // after the listener: the program needs the member until then
	return w.ServeDrained(ln, func() error { return nil }, ctx.Done(), drain.Options{Steerer: m.Group()})
}
