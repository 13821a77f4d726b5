package zerodrop

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Service is what a Generation serves on its listeners, and stops: Serve
// runs an http.Server through one (a drain.Server per listener), package
// grpcdrain a gRPC server. Generation.Run drives it.
type Service interface {
	// Start serves every listener of g in the background, and returns once
	// each is taken: a Stop from then on drains it. A value on served says
	// a listener stopped serving on its own (the generation then stops). An
	// error means the generation must not serve (Run stops the Service).
	Start(g *Generation) (served <-chan error, err error)
	// Stop drains everything Start served, delay first (Config.Delay for a
	// stop by signal or ctx, 0 once a successor took over), bounded by ctx.
	Stop(ctx context.Context, cause string, delay time.Duration) error
}

// A ReadyService is a Service with work to do once the generation is ready
// (the predecessor was told to stop), before OnServing: quicdrain's starts
// reading its UDP socket then, as the predecessor stops reading it. An
// error stops the generation with cause "serve failed".
type ReadyService interface {
	Service
	Serving(ctx context.Context) error
}

// Run is the life of a generation serving s, the steps every kind of server
// goes through: OnListen; Start; Ready (the predecessor stops, systemd is
// told), s's Serving if it is a ReadyService, OnServing; Wait (upgrade signals start successors) until the
// generation must stop; Stopping; Stop, bounded by the stop's delay plus
// Config.Grace; Linger. It returns why the generation stopped and what
// failed. Start failing stops s with cause "start failed", Ready with
// "ready failed" (the predecessor serves on: a drain releases the sockets
// it shares), and a listener that stopped serving with "serve failed".
// Call Close after.
func (g *Generation) Run(ctx context.Context, s Service, status string) (cause string, err error) {
	stop := func(cause string, delay time.Duration) error {
		g.Stopping(cause)
		dctx, cancel := context.WithTimeout(context.Background(), delay+orDefaultDuration(g.cfg.Grace, 30*time.Second))
		defer cancel()
		return s.Stop(dctx, cause, delay)
	}
	if g.cfg.OnListen != nil {
		g.cfg.OnListen(g.Number(), g.Addrs())
	}
	served, err := s.Start(g)
	if err != nil {
		return "start failed", errors.Join(err, stop("start failed", 0))
	}
	if err := g.Ready(status); err != nil {
		return "ready failed", errors.Join(err, stop("ready failed", 0))
	}
	if rs, ok := s.(ReadyService); ok {
		if err := rs.Serving(ctx); err != nil {
			return "serve failed", errors.Join(fmt.Errorf("zerodrop: serve: %w", err), stop("serve failed", 0))
		}
	}
	if g.cfg.OnServing != nil {
		g.cfg.OnServing(g.Number(), g.Addrs())
	}
	cause, delay, err := g.Wait(ctx, served)
	if err != nil {
		return cause, errors.Join(fmt.Errorf("zerodrop: serve: %w", err), stop(cause, 0))
	}
	err = stop(cause, delay)
	g.Linger(ctx, cause)
	return cause, err
}
