package grpcdrain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/runonce"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
)

// Config configures New. The zero value means: no delay, no logging, the
// default listener options.
type Config struct {
	// Delay is how long Shutdown keeps serving with the health service
	// answering NOT_SERVING, so that load balancers move first. Zero means
	// no delay.
	Delay time.Duration
	// Listener configures the drain.Listener that Serve wraps a plain
	// listener in. Its Logger and OnReport are ignored: the Server logs and
	// reports the whole drain once.
	Listener drain.Options
	// Logger receives the report once per Shutdown; nil means no logging.
	Logger *zap.Logger
	// OnReport, if set, is called once per Shutdown with the report, after
	// it is logged. It must not block and must not change the report.
	OnReport func(*Report)
}

// Server is a *grpc.Server that drains without losing an RPC: see the
// package documentation for the order of the phases.
type Server struct {
	cfg    Config
	gs     *grpc.Server
	health *health.Server
	t      *tracker

	mu       sync.Mutex
	lns      []*trackedListener
	serving  sync.WaitGroup // Serve calls still in grpc.Server.Serve
	draining atomic.Bool
	shut     runonce.Call[*Report] // the one drain: callers get copies of its report
}

// New returns a Server whose grpc.Server is built with opts plus a
// stats.Handler that counts RPCs, and serves the standard health service
// (grpc.health.v1; see Health). Register your services on GRPC before
// Serve.
func New(cfg Config, opts ...grpc.ServerOption) *Server {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	t := newTracker()
	s := &Server{cfg: cfg, t: t, health: health.NewServer()}
	s.gs = grpc.NewServer(append(opts, grpc.StatsHandler(t))...)
	healthgrpc.RegisterHealthServer(s.gs, &healthService{Server: s.health, t: t})
	return s
}

// GRPC returns the grpc.Server to register services on. Do not call its
// Serve, Stop or GracefulStop: use the Server's.
func (s *Server) GRPC() *grpc.Server { return s.gs }

// Health returns the health service's state: every service set SERVING
// with SetServingStatus answers NOT_SERVING from the start of Shutdown (the
// empty name "" is the whole server, SERVING until then).
func (s *Server) Health() *health.Server { return s.health }

// Serve serves gRPC on l, wrapped by drain.Wrap unless it is a
// *drain.Listener already; it takes ownership of l. It may be called once
// per listener, from several goroutines. It returns nil once Shutdown has
// stopped l, grpc.ErrServerStopped when called after Shutdown began, and
// the error of drain.Wrap (l closed) or of Accept otherwise.
func (s *Server) Serve(l net.Listener) error {
	tl, err := s.take(l)
	if err != nil {
		return err
	}
	return s.serveTaken(tl)
}

// take wraps l and registers it, so that a Shutdown from then on drains it;
// after Shutdown began it closes l and returns grpc.ErrServerStopped.
func (s *Server) take(l net.Listener) (*trackedListener, error) {
	dl, ok := l.(*drain.Listener)
	if !ok {
		opts := s.cfg.Listener
		opts.Logger, opts.OnReport = nil, nil
		var err error
		if dl, err = drain.Wrap(l, opts); err != nil {
			if l != nil && !errors.Is(err, drain.ErrNilListener) {
				l.Close()
			}
			return nil, err
		}
	}
	tl := &trackedListener{Listener: dl, t: s.t}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		dl.Close()
		return nil, grpc.ErrServerStopped
	}
	s.lns = append(s.lns, tl)
	s.serving.Add(1)
	return tl, nil
}

// serveTaken serves gRPC on a listener take registered.
func (s *Server) serveTaken(tl *trackedListener) error {
	defer s.serving.Done()
	err := s.gs.Serve(tl)
	if s.draining.Load() && (err == nil || errors.Is(err, net.ErrClosed)) {
		return nil
	}
	if errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	if err != nil {
		return neterr.Op("serve", "tcp", tl.Addr(), err)
	}
	return nil
}

// Shutdown drains the server, each phase bounded by ctx: the health
// service answers NOT_SERVING; Delay; every listener stops without losing
// its queue and every connection accepted is handed to gRPC; health watches
// end; GracefulStop (GOAWAY, RPCs in flight finish). When ctx ends first,
// the RPCs still open are named in the report and Stop ends them; the error
// wraps ctx.Err(). The report is logged once.
//
// The drain runs once. A Shutdown called while it runs waits for it (or
// for its own ctx, then it gets a nil report); every caller gets a copy of
// the report of its own.
func (s *Server) Shutdown(ctx context.Context) (*Report, error) {
	s.mu.Lock()
	s.draining.Store(true) // Serve refuses from now on
	s.mu.Unlock()
	rep, err, ok := s.shut.Do(ctx, func() (*Report, error) { return s.shutdown(ctx) })
	if !ok {
		return nil, neterr.Op("shutdown", "tcp", nil, fmt.Errorf("waiting for the Shutdown in progress: %w", err))
	}
	return rep.clone(), err
}

// shutdown is the one drain Shutdown runs.
func (s *Server) shutdown(ctx context.Context) (*Report, error) {
	start := time.Now()
	r := &Report{Started: start, InFlightAtStart: s.t.begin()}
	s.health.Shutdown()
	s.cfg.Logger.Debug("grpc drain begins", zap.String("event", "grpcdrain.begin"),
		zap.Int("in_flight_at_start", r.InFlightAtStart), zap.Duration("delay", s.cfg.Delay))
	errs := []error{sleep(ctx, s.cfg.Delay)}
	r.DelayTook = time.Since(start)

	t0 := time.Now()
	r.Listeners, errs = s.stopListeners(ctx, errs)
	errs = append(errs, s.t.waitStarted(ctx))
	r.StopTook = time.Since(t0)

	t0 = time.Now()
	r.Conns = s.t.transports()
	s.t.endWatches()
	if err := s.gracefulStop(ctx, r); err != nil {
		errs = append(errs, err)
	}
	r.GracefulTook = time.Since(t0)
	r.Completed, r.Failed = s.t.counts()
	r.Took = time.Since(start)
	r.log(s.cfg.Logger)
	if s.cfg.OnReport != nil {
		s.cfg.OnReport(r)
	}
	return r, errors.Join(errs...)
}

// stopListeners stops every listener at once, then waits until every Serve
// loop has returned, so that gRPC has started a goroutine for each
// connection the drain accepted.
func (s *Server) stopListeners(ctx context.Context, errs []error) ([]*drain.Report, []error) {
	s.mu.Lock()
	lns := s.lns
	s.mu.Unlock()
	reps := make([]*drain.Report, len(lns))
	lerrs := make([]error, len(lns))
	var wg sync.WaitGroup
	for i, l := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], lerrs[i] = l.Listener.(*drain.Listener).Stop(ctx)
		}()
	}
	wg.Wait()
	errs = append(errs, lerrs...)
	served := make(chan struct{})
	go func() { s.serving.Wait(); close(served) }()
	select {
	case <-served:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("waiting for Serve to return: %w", ctx.Err()))
	}
	return reps, errs
}

// gracefulStop runs GracefulStop bounded by ctx; at its end it names what
// is left in r and runs Stop.
func (s *Server) gracefulStop(ctx context.Context, r *Report) error {
	done := make(chan struct{})
	go func() { s.gs.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	r.Forced = s.t.open(time.Now())
	s.t.closeConns()
	s.gs.Stop()
	err := fmt.Errorf("grpc graceful stop: %d RPCs forced: %w", len(r.Forced), ctx.Err())
	// GracefulStop also waits for the handlers to return, which Stop does
	// not make them do: a handler that ignores its context keeps it.
	tm := time.NewTimer(handlerWait)
	defer tm.Stop()
	select {
	case <-done:
	case <-tm.C:
		r.HandlersLeft = true
		err = errors.Join(err, fmt.Errorf("grpc handlers still running %v after Stop", handlerWait))
	}
	return err
}

// handlerWait is how long Shutdown waits, after Stop, for handlers to see
// their contexts end.
const handlerWait = time.Second

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("delay: %w", ctx.Err())
	}
}
