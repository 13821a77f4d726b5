package grpcdrain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
)

// ServeReport says how a generation served by Serve ended.
type ServeReport struct {
	Generation uint64  `json:"generation"`
	Cause      string  `json:"cause"` // "successor ready", a signal's name, or the ctx's error
	Drain      *Report `json:"drain"`
}

// CauseSuccessor is ServeReport.Cause when a successor took over.
const CauseSuccessor = "successor ready"

// Serve runs s as one generation of a service on the TCP addresses given,
// as zerodrop.Serve runs an http.Server: it takes each listener from the
// predecessor on opts.Handoff, else from systemd socket activation, else
// creates a fresh reuseport socket; serves them all through s; tells the
// predecessor and systemd it is ready; then waits. An upgrade signal
// (default SIGHUP) starts a successor. It stops when the successor is
// ready (without Delay: the successor serves the same sockets), on a stop
// signal (default SIGTERM, SIGINT) or when ctx ends (with Delay), drains s
// (Server.Shutdown, bounded by opts.Delay + opts.Grace) and returns the
// report.
//
// opts is zerodrop.Options; ReadyPath does not apply (the health service
// is the readiness: see Server.Health) and must be empty; OnReport is
// called once per listener. opts.Delay replaces s's Config.Delay for the
// stops that have one. Serve installs signal handlers for its duration,
// as zerodrop.Serve does.
func Serve(ctx context.Context, s *Server, addrs []string, opts zerodrop.Options) (*ServeReport, error) {
	switch {
	case s == nil:
		return nil, errors.New("grpcdrain: nil Server")
	case len(addrs) == 0:
		return nil, zerodrop.ErrNoAddress
	case opts.ReadyPath != "":
		return nil, errors.New("grpcdrain: Options.ReadyPath does not apply to gRPC (the health service answers)")
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, signalsOr(opts.Signals, syscall.SIGTERM, syscall.SIGINT)...)
	defer signal.Stop(stop)

	g, err := open(ctx, addrs, opts, log)
	if err != nil {
		return nil, err
	}
	defer g.close()
	rep := &ServeReport{Generation: g.generation()}
	if opts.OnListen != nil {
		opts.OnListen(rep.Generation, g.addrs())
	}
	served := make(chan error, len(g.lns))
	for _, l := range g.lns {
		go func() { served <- s.Serve(l) }()
	}
	shutdown := func(cause string, delay time.Duration) (*ServeReport, error) {
		rep.Cause = cause
		log.Info("stopping", zap.String("event", "zerodrop.stop"), zap.Uint64("generation", rep.Generation), zap.String("cause", cause))
		if n := systemd.FromEnv(); n != nil && cause != CauseSuccessor {
			n.Stopping(fmt.Sprintf("generation %d stopping: %s", rep.Generation, cause))
		}
		s.cfg.Delay = delay
		grace := opts.Grace
		if grace <= 0 {
			grace = 30 * time.Second
		}
		dctx, cancel := context.WithTimeout(context.Background(), delay+grace)
		defer cancel()
		var err error
		rep.Drain, err = s.Shutdown(dctx)
		if rep.Drain != nil && opts.OnReport != nil {
			for _, l := range rep.Drain.Listeners {
				opts.OnReport(l)
			}
		}
		for range g.lns {
			if serr := <-served; serr != nil {
				err = errors.Join(err, serr)
			}
		}
		return rep, err
	}

	if err := g.ready(rep.Generation, addrs, log); err != nil {
		_, serr := shutdown("ready failed", 0)
		return rep, errors.Join(err, serr)
	}
	if opts.OnServing != nil {
		opts.OnServing(rep.Generation, g.addrs())
	}
	var upgrade chan os.Signal
	if g.u != nil {
		upgrade = make(chan os.Signal, 1)
		signal.Notify(upgrade, signalsOr(opts.UpgradeSignals, syscall.SIGHUP)...)
		defer signal.Stop(upgrade)
	}
	for {
		select {
		case <-upgrade:
			if err := startSuccessor(opts.Successor, log); err != nil {
				log.Warn("successor not started", zap.String("event", "zerodrop.successor_failed"), zap.Error(err))
			}
		case <-g.exit():
			return shutdown(CauseSuccessor, 0)
		case sig := <-stop:
			return shutdown(sig.String(), opts.Delay)
		case <-ctx.Done():
			return shutdown(ctx.Err().Error(), opts.Delay)
		case err := <-served:
			served <- nil // shutdown collects one result per listener
			_, serr := shutdown("serve failed", 0)
			return rep, errors.Join(fmt.Errorf("grpcdrain: serve: %w", err), serr)
		}
	}
}

// generation is the listeners of one process and where they came from.
type generation struct {
	u   *handoff.Upgrader // nil without Handoff
	act *systemd.Activation
	lns []net.Listener
	wd  *systemd.Watchdog
}

func (g *generation) generation() uint64 {
	if g.u == nil {
		return 1
	}
	return g.u.Generation()
}

func (g *generation) addrs() []net.Addr {
	as := make([]net.Addr, len(g.lns))
	for i, l := range g.lns {
		as[i] = l.Addr()
	}
	return as
}

func (g *generation) exit() <-chan struct{} {
	if g.u == nil {
		return nil
	}
	return g.u.Exit()
}

// open gets every listener, or none: on error the ones already had are
// closed.
func open(ctx context.Context, addrs []string, opts zerodrop.Options, log *zap.Logger) (g *generation, err error) {
	g = &generation{}
	defer func() {
		if err != nil {
			for _, l := range g.lns {
				l.Close()
			}
			g.close()
			g = nil
		}
	}()
	cfg := opts.Listen
	if cfg.Logger == nil {
		cfg.Logger = opts.Logger
	}
	if opts.Handoff != "" {
		if cfg.Migration == reuseport.MigrationWarn {
			cfg.Migration = reuseport.MigrationIgnore
		}
		g.u, err = handoff.New(ctx, handoff.Config{Path: opts.Handoff, PIDFile: opts.PIDFile, AllowUIDs: opts.AllowUIDs,
			Listen: cfg, Logger: opts.Logger, OnHandoff: opts.OnHandoff})
		if err != nil {
			return g, err
		}
	} else if g.act, err = systemd.Activated(); err != nil {
		return g, err
	}
	for _, a := range addrs {
		l, err := g.listen(ctx, a, &cfg)
		if err != nil {
			return g, err
		}
		g.lns = append(g.lns, l)
	}
	if g.act != nil {
		if left := g.act.Available(); len(left) > 0 {
			log.Warn("activated sockets not used", zap.String("event", "zerodrop.unused_fds"), zap.Strings("fds", left))
		}
	}
	return g, nil
}

// listen returns the listener for address a: inherited, activated or fresh.
func (g *generation) listen(ctx context.Context, a string, cfg *reuseport.Config) (net.Listener, error) {
	if g.u != nil {
		return g.u.Listen(ctx, a, "tcp", a)
	}
	l, err := g.act.Listener(ctx, a, "tcp", a, cfg)
	if errors.Is(err, systemd.ErrNotFound) || (err == nil && l == nil) {
		return cfg.Listen(ctx, "tcp", a)
	}
	return l, err
}

// ready tells the predecessor and systemd that we serve, and starts the
// watchdog pings systemd asked for.
func (g *generation) ready(gen uint64, addrs []string, log *zap.Logger) error {
	if g.u != nil {
		if err := g.u.Ready(); err != nil {
			return err
		}
	}
	n := systemd.FromEnv()
	if n == nil {
		return nil
	}
	n.Logger = log
	if gen > 1 { // a reload: we are the service's main process now
		if err := n.MainPID(os.Getpid()); err != nil {
			return err
		}
	}
	if err := n.Ready(fmt.Sprintf("generation %d serving gRPC on %s", gen, strings.Join(addrs, " "))); err != nil {
		return err
	}
	w, err := n.StartWatchdog(context.Background())
	if err == nil && w == nil && gen > 1 { // WATCHDOG_PID still names the predecessor
		var iv time.Duration
		if iv, err = systemd.WatchdogInterval(); err == nil {
			w = n.Pinger(context.Background(), iv)
		}
	}
	g.wd = w
	return err
}

// close releases what the drain did not: the Upgrader, activated fds no
// address took, the watchdog.
func (g *generation) close() {
	if g.wd != nil {
		g.wd.Stop()
	}
	if g.u != nil {
		g.u.Close()
	}
	if g.act != nil {
		g.act.Close()
	}
}

// startSuccessor starts the next generation; it is reaped here if it exits
// while we run (a failed start: we keep serving), or by systemd, whose child
// it is when we run under systemd.
func startSuccessor(successor func() *exec.Cmd, log *zap.Logger) error {
	var cmd *exec.Cmd
	if successor != nil {
		cmd = successor()
	} else {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cmd = exec.Command(exe, os.Args[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	}
	// Under systemd the successor is systemd's child (see
	// systemd.StartSuccessor): systemd waits for it at the next stop.
	sibling, err := systemd.StartSuccessor(cmd)
	if err != nil {
		return err
	}
	log.Info("successor started", zap.String("event", "zerodrop.successor"), zap.Int("pid", cmd.Process.Pid), zap.String("path", cmd.Path), zap.Bool("systemd_child", sibling))
	if !sibling {
		go cmd.Wait()
	}
	return nil
}

func signalsOr(s []os.Signal, def ...os.Signal) []os.Signal {
	if len(s) > 0 {
		return s
	}
	return def
}
