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

// ErrNoServer is returned by Serve when it is given a nil Server.
var ErrNoServer = errors.New("grpcdrain: no Server to serve")

// Serve runs s as one generation of a service on the TCP addresses given,
// as zerodrop.Serve runs an http.Server: it takes each listener from the
// predecessor on cfg.Handoff.Path, else from systemd socket activation, else
// creates a fresh reuseport socket; serves them all through s; tells the
// predecessor and systemd it is ready; then waits. An upgrade signal
// (default SIGHUP) starts a successor. It stops when the successor is
// ready (without Delay: the successor serves the same sockets), on a stop
// signal (default SIGTERM, SIGINT) or when ctx ends (with Delay), drains s
// (Server.Shutdown, bounded by cfg.Delay + cfg.Grace) and returns the
// report.
//
// cfg is the zerodrop.Config that Open takes, not zerodrop.Options: the
// HTTP fields of Options (ReadyPath, Drain, NoConnHandoff, TLSHandoff,
// Pool, NoTicketHandoff) have no meaning for a gRPC server, so they cannot
// be set. The health service is the readiness (Server.Health), s's
// Config.OnReport gets the report, a gRPC connection is never handed over
// (each gets the two-step GOAWAY), and session-ticket keys are the
// caller's to install (see the package doc). cfg.Delay replaces s's
// Config.Delay for the stops that have one. Serve installs signal handlers
// for its duration, as zerodrop.Serve does (see Config.NoSignals). It
// returns ErrNoServer for a nil s and zerodrop.ErrNoAddress without an
// address.
func Serve(ctx context.Context, s *Server, addrs []string, cfg zerodrop.Config) (*ServeReport, error) {
	switch {
	case s == nil:
		return nil, ErrNoServer
	case len(addrs) == 0:
		return nil, zerodrop.ErrNoAddress
	}
	g, err := zerodrop.Open(ctx, addrs, cfg)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	gs := &service{s: s}
	rep := &ServeReport{Generation: g.Number()}
	rep.Cause, err = g.Run(ctx, gs, fmt.Sprintf("generation %d serving gRPC on %s", rep.Generation, strings.Join(addrs, " ")))
	rep.Drain = gs.drain
	return rep, err
}

// service is Serve's zerodrop.Service: s on every listener of the
// generation.
type service struct {
	s      *Server
	n      int // listeners served
	served chan error
	drain  *Report
}

// Start registers every listener before any Stop can begin (a Ready that
// fails at once drains them), and serves them in the background.
func (gs *service) Start(g *zerodrop.Generation) (<-chan error, error) {
	lns := g.Listeners()
	gs.n, gs.served = len(lns), make(chan error, len(lns)+1)
	for _, l := range lns {
		tl, err := gs.s.take(l)
		if err != nil {
			gs.served <- err
			continue
		}
		go func() { gs.served <- gs.s.serveTaken(tl) }()
	}
	return gs.served, nil
}

// Stop drains s (its Config.Delay is the stop's) and collects every
// listener's Serve result.
func (gs *service) Stop(ctx context.Context, cause string, delay time.Duration) error {
	gs.s.cfg.Delay = delay
	var err error
	gs.drain, err = gs.s.Shutdown(ctx)
	n := gs.n
	if cause == "serve failed" {
		n-- // Wait took that listener's result
	}
	for range n {
		if serr := <-gs.served; serr != nil {
			err = errors.Join(err, serr)
		}
	}
	return err
}
