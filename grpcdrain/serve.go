package grpcdrain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/zerodrop/zerodrop"
)

// ServeReport says how a generation served by Serve ended.
type ServeReport struct {
	Generation uint64  `json:"generation"`
	Cause      string  `json:"cause"` // "successor ready", a signal's name, or the ctx's error
	Drain      *Report `json:"drain"`
}

// CauseSuccessor is ServeReport.Cause when a successor took over.
const CauseSuccessor = zerodrop.CauseSuccessor

// Serve runs s as one generation of a service on the TCP addresses given,
// as zerodrop.Serve runs an http.Server: it takes each listener from the
// predecessor on opts.Handoff.Path, else from systemd socket activation, else
// creates a fresh reuseport socket; serves them all through s; tells the
// predecessor and systemd it is ready; then waits. An upgrade signal
// (default SIGHUP) starts a successor. It stops when the successor is
// ready (without Delay: the successor serves the same sockets), on a stop
// signal (default SIGTERM, SIGINT) or when ctx ends (with Delay), drains s
// (Server.Shutdown, bounded by opts.Delay + opts.Grace) and returns the
// report.
//
// opts is zerodrop.Options; ReadyPath does not apply (the health service
// is the readiness: see Server.Health) and must be empty, and so must the
// HTTP ones (Drain, NoConnHandoff, Pool): s's Config.OnReport gets the
// report. opts.Delay replaces s's Config.Delay for the stops that have one.
// Serve installs signal handlers for its duration, as zerodrop.Serve does
// (see Options.NoSignals).
func Serve(ctx context.Context, s *Server, addrs []string, opts zerodrop.Options) (*ServeReport, error) {
	switch {
	case s == nil:
		return nil, errors.New("grpcdrain: nil Server")
	case len(addrs) == 0:
		return nil, zerodrop.ErrNoAddress
	case opts.ReadyPath != "":
		return nil, errors.New("grpcdrain: Options.ReadyPath does not apply to gRPC (the health service answers)")
	case opts.Drain != nil, opts.NoConnHandoff, opts.Pool != "":
		return nil, errors.New("grpcdrain: Options.Drain, NoConnHandoff and Pool are for HTTP servers (a gRPC connection cannot be handed over)")
	}
	g, err := zerodrop.Open(ctx, addrs, opts)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	rep := &ServeReport{Generation: g.Number()}
	if opts.OnListen != nil {
		opts.OnListen(rep.Generation, g.Addrs())
	}
	lns := g.Listeners()
	served := make(chan error, len(lns))
	for _, l := range lns {
		// Registered before any Shutdown can begin (a Ready that fails at
		// once drains them), served in the background.
		tl, err := s.take(l)
		if err != nil {
			served <- err
			continue
		}
		go func() { served <- s.serveTaken(tl) }()
	}
	shutdown := func(cause string, delay time.Duration) (*ServeReport, error) {
		rep.Cause = cause
		g.Stopping(cause)
		s.cfg.Delay = delay
		grace := opts.Grace
		if grace <= 0 {
			grace = 30 * time.Second
		}
		dctx, cancel := context.WithTimeout(context.Background(), delay+grace)
		defer cancel()
		var err error
		rep.Drain, err = s.Shutdown(dctx)
		for range lns {
			if serr := <-served; serr != nil {
				err = errors.Join(err, serr)
			}
		}
		return rep, err
	}

	if err := g.Ready(fmt.Sprintf("generation %d serving gRPC on %s", rep.Generation, strings.Join(addrs, " "))); err != nil {
		_, serr := shutdown("ready failed", 0)
		return rep, errors.Join(err, serr)
	}
	if opts.OnServing != nil {
		opts.OnServing(rep.Generation, g.Addrs())
	}
	cause, delay, err := g.Wait(ctx, served)
	if cause == "serve failed" {
		served <- nil // shutdown collects one result per listener
		_, serr := shutdown(cause, 0)
		return rep, errors.Join(fmt.Errorf("grpcdrain: serve: %w", err), serr)
	}
	rep, err = shutdown(cause, delay)
	g.Linger(ctx, cause)
	return rep, err
}
