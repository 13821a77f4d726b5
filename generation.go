package zerodrop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/sockets"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Generation is one process of a service and its listeners, one per address,
// each taken the right way for where the process runs: from the predecessor
// on Config.Handoff, else from systemd socket activation, else a fresh
// reuseport socket. Serve runs an http.Server on one; a server of another
// kind (grpcdrain.Serve) runs its own on one:
//
//	g, err := zerodrop.Open(ctx, addrs, cfg)
//	// serve g.Listeners()...
//	err = g.Ready("serving")
//	cause, delay, err := g.Wait(ctx, served)
//	g.Stopping(cause)
//	// drain, with delay when a signal or ctx stopped us...
//	g.Close()
//
// Open installs the handlers of Config.Signals and, with Handoff.Path and
// Successor, of Config.UpgradeSignals, unless Config.NoSignals; Close
// removes them.
type Generation struct {
	u     *handoff.Upgrader // nil without Handoff
	table *sockets.Table    // the Upgrader's, or our own without Handoff
	names []string          // the addresses, the listeners' names in the table
	lns   []net.Listener
	wd    *systemd.Watchdog
	log   *zap.Logger
	cfg   Config

	stop, upgrade chan os.Signal // upgrade is nil without Handoff.Path and Successor
	upgradeNow    chan struct{}  // Upgrade
}

// CauseSuccessor is Wait's cause when a successor took over; Report.Cause
// says it then too.
const CauseSuccessor = "successor ready"

// Open takes a listener for every address from one socket table (package
// sockets: the predecessor's through handoff, else systemd's, else fresh),
// or none: on error those already taken are closed. Of cfg it reads
// Handoff, Logger, Signals, UpgradeSignals, NoSignals and Successor; the
// Generation's Wait and Run read the rest.
// A first generation started by systemd imports into Handoff.TicketKeys the
// keys a previous run kept in the fd store (systemd.Activation.Tickets).
func Open(ctx context.Context, addrs []string, cfg Config) (g *Generation, err error) {
	if len(addrs) == 0 {
		return nil, ErrNoAddress
	}
	g = &Generation{log: cfg.Logger, cfg: cfg, stop: make(chan os.Signal, 1), upgradeNow: make(chan struct{}, 1)}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if !cfg.NoSignals {
		signal.Notify(g.stop, signalsOr(cfg.Signals, syscall.SIGTERM, syscall.SIGINT)...)
	}
	defer func() {
		if err != nil {
			for _, l := range g.lns {
				l.Close()
			}
			g.Close()
			g = nil
		}
	}()
	hc := cfg.Handoff
	if hc.Logger == nil {
		hc.Logger = cfg.Logger
	}
	if hc.Listen.Logger == nil {
		hc.Listen.Logger = cfg.Logger
	}
	if hc.Path != "" {
		if hc.Listen.Migration == reuseport.MigrationWarn {
			hc.Listen.Migration = reuseport.MigrationIgnore // a handoff-only service does not migrate
		}
		if g.u, err = handoff.New(ctx, hc); err != nil {
			return g, err
		}
		if cfg.Successor != nil && !cfg.NoSignals {
			g.upgrade = make(chan os.Signal, 1)
			signal.Notify(g.upgrade, signalsOr(cfg.UpgradeSignals, syscall.SIGHUP)...)
		}
		g.table = g.u.Table()
	} else if g.table, err = sockets.New(sockets.Config{Listen: hc.Listen, WarnOnMismatch: hc.WarnOnMismatch, Systemd: true, Logger: hc.Logger}, nil); err != nil {
		return g, err
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		name := a // a successor given the same addresses finds the same names
		if seen[a] {
			name = fmt.Sprintf("%s#%d", a, i) // the same address twice (port 0)
		}
		seen[a] = true
		l, err := g.table.Listen(ctx, name, "tcp", a)
		if err != nil {
			return g, err
		}
		g.names = append(g.names, name)
		g.lns = append(g.lns, l)
	}
	g.restoreTickets()
	if left := g.table.Unclaimed(); len(left) > 0 {
		g.log.Warn("sockets passed to us and not used", zap.String("event", "zerodrop.unused_fds"), zap.Strings("fds", left))
	}
	return g, nil
}

// Number is the generation's number: the predecessor's plus one, or 1.
func (g *Generation) Number() uint64 {
	if g.u == nil {
		return 1
	}
	return g.u.Generation()
}

// Listeners returns the listeners, in the order of Open's addresses. Whoever
// serves one owns it (closes it, or drains it).
func (g *Generation) Listeners() []net.Listener { return g.lns }

// Addrs returns the listeners' addresses, in the same order.
func (g *Generation) Addrs() []net.Addr {
	as := make([]net.Addr, len(g.lns))
	for i, l := range g.lns {
		as[i] = l.Addr()
	}
	return as
}

// Upgrader returns the handoff Upgrader, or nil without Config.Handoff.
func (g *Generation) Upgrader() *handoff.Upgrader { return g.u }

// Ready tells the predecessor (handoff's Ready: it stops) and systemd that
// this generation serves: a successor first makes itself the service's main
// process (MAINPID=), then READY=1 with status, and the watchdog pings
// systemd asked for start (a successor's too, whatever WATCHDOG_PID says).
//
// Ready returns an error only when this generation must not serve: its
// predecessor was not told to stop and still serves (close or drain what
// Open took; a drain releases the inherited sockets), or a first generation
// could not set up its handoff socket. Once the predecessor was told to stop,
// this generation is the one that serves, and nothing after that point is a
// reason to stop it: a later handoff step that failed
// (handoff.ErrReadyIncomplete), MAINPID=, READY=1 or the watchdog's set-up
// failing is logged (event zerodrop.ready_incomplete) and Ready returns nil.
// Under systemd it also keeps Config.Handoff.TicketKeys in the fd store, for a
// restart (named ticket.FDName; see package ticket).
func (g *Generation) Ready(status string) error {
	if g.u != nil {
		if err := g.u.Ready(); errors.Is(err, handoff.ErrReadyIncomplete) {
			g.incomplete("handoff", err)
		} else if err != nil {
			return err
		}
	}
	n := systemd.FromEnv()
	if n == nil {
		return nil
	}
	n.Logger = g.cfg.Logger
	gen := g.Number()
	if gen > 1 { // a reload: we are the service's main process now
		if err := n.MainPID(os.Getpid()); err != nil {
			g.incomplete("MAINPID", err)
		}
	}
	if err := n.Ready(status); err != nil {
		g.incomplete("READY", err)
	}
	g.storeTickets()
	w, err := n.StartWatchdog(context.Background())
	if err == nil && w == nil && gen > 1 { // WATCHDOG_PID still names the predecessor
		var iv time.Duration
		if iv, err = systemd.WatchdogInterval(); err == nil {
			w = n.Pinger(context.Background(), iv)
		}
	}
	if err != nil {
		g.incomplete("watchdog", err)
	}
	g.wd = w
	return nil
}

// incomplete logs a step of Ready that failed after the point where this
// generation serves whatever happens.
func (g *Generation) incomplete(step string, err error) {
	g.log.Warn("ready incomplete; serving anyway", zap.String("event", "zerodrop.ready_incomplete"), zap.String("step", step), zap.Error(err))
}

// Upgrade asks Wait to start a successor (Config.Successor), as an upgrade
// signal does; it does not wait. It reports false when there is nothing to
// start (no Handoff.Path or no Successor) or a request is already pending.
func (g *Generation) Upgrade() bool {
	if g.u == nil || g.cfg.Successor == nil {
		return false
	}
	select {
	case g.upgradeNow <- struct{}{}:
		return true
	default:
		return false
	}
}

// Wait serves the upgrade signals and Upgrade (each starts a successor:
// Config.Successor; a failure is logged, and we go on serving) and
// returns why the generation must stop, and with which Delay: CauseSuccessor
// (delay 0: the successor serves the same sockets; also when a stop signal
// or ctx came while a successor was taking over and it did), a stop signal's
// name or ctx's error (Config.Delay), or, when served yields a value (a server
// stopped serving), "serve failed" with that value (delay 0).
func (g *Generation) Wait(ctx context.Context, served <-chan error) (cause string, delay time.Duration, err error) {
	var exit <-chan struct{}
	if g.u != nil {
		exit = g.u.Exit()
	}
	for {
		select {
		case <-g.upgrade:
			g.startSuccessor()
		case <-g.upgradeNow:
			g.startSuccessor()
		case <-exit:
			return CauseSuccessor, 0, nil
		case sig := <-g.stop:
			if g.settle(ctx) {
				return CauseSuccessor, 0, nil
			}
			return sig.String(), g.cfg.Delay, nil
		case <-ctx.Done():
			if g.settle(context.Background()) {
				return CauseSuccessor, 0, nil
			}
			return ctx.Err().Error(), g.cfg.Delay, nil
		case err := <-served:
			return "serve failed", 0, err
		}
	}
}

// settle waits for a successor taking over right now (handoff's Settle,
// bounded by its timeouts, ctx, or another stop signal) and reports whether
// one took over: a stop requested meanwhile then hands over to it, as if the
// successor's ready had come first.
func (g *Generation) settle(ctx context.Context) bool {
	if g.u == nil {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-g.stop: // asked twice: stop now
			cancel()
		case <-ctx.Done():
		}
	}()
	return g.u.Settle(ctx)
}

// Linger keeps a generation that is PID 1 of its PID namespace (a
// container's main process: podman, nspawn) alive after a successor took
// over, because the kernel ends every process of the namespace when its
// PID 1 exits: it stays the namespace's init, reaps the processes that end,
// passes each stop signal (Config.Signals) it gets, and ctx's end, to
// every other process of the namespace, and returns once none is left.
// In any other process, or when no successor took over, it returns at once.
// Serve calls it after its drain. Call it before Close.
func (g *Generation) Linger(ctx context.Context, cause string) {
	if cause != CauseSuccessor || !systemd.NamespaceInit() {
		return
	}
	g.log.Info("PID 1 of the namespace: staying its init until the successors exit", zap.String("event", "zerodrop.linger"))
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		for {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(-1, &ws, 0, nil); err == unix.ECHILD {
				return
			}
		}
	}()
	done := ctx.Done()
	for {
		select {
		case <-reaped:
			return
		case sig := <-g.stop:
			unix.Kill(-1, sig.(syscall.Signal)) // every process of the namespace but us
		case <-done:
			done = nil
			unix.Kill(-1, unix.SIGTERM)
		}
	}
}

// Stopping logs the stop and, unless a successor took over, tells systemd
// (STOPPING=1) and stores Config.Handoff.TicketKeys in its fd store for the next
// start.
func (g *Generation) Stopping(cause string) {
	g.log.Info("stopping", zap.String("event", "zerodrop.stop"), zap.Uint64("generation", g.Number()), zap.String("cause", cause))
	if n := systemd.FromEnv(); n != nil && cause != CauseSuccessor {
		n.Stopping(fmt.Sprintf("generation %d stopping: %s", g.Number(), cause))
		g.storeTickets()
	}
}

// Close releases what the servers did not: the Upgrader, the socket
// table's references and the activated fds no address took, the watchdog, the signal handlers. It does not close the
// listeners (their servers do).
func (g *Generation) Close() error {
	signal.Stop(g.stop)
	if g.upgrade != nil {
		signal.Stop(g.upgrade)
	}
	if g.wd != nil {
		g.wd.Stop()
	}
	switch {
	case g.u != nil:
		return g.u.Close() // and its table
	case g.table != nil:
		return g.table.Close()
	}
	return nil
}

// ReExec is an Config.Successor that starts this executable again, with
// our arguments, environment, stdout and stderr. The executable is the one
// this process runs now (/proc/self/exe), so that a binary replaced on disk
// at the same path starts in its new version.
func ReExec() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = "/proc/self/exe"
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}

// startSuccessor starts Config.Successor's command, and logs a failure (we
// keep serving).
func (g *Generation) startSuccessor() {
	if err := startSuccessor(g.cfg.Successor, g.log); err != nil {
		g.log.Warn("successor not started", zap.String("event", "zerodrop.successor_failed"), zap.Error(err))
	}
}

// startSuccessor starts the next generation; it is reaped here if it exits
// while we run (a failed start: we keep serving), or by systemd, whose child
// it is when we run under systemd.
func startSuccessor(successor func() *exec.Cmd, log *zap.Logger) error {
	cmd := successor()
	if cmd == nil {
		return errors.New("zerodrop: Config.Successor returned no command")
	}
	// Under systemd the successor is systemd's child (see
	// systemd.StartSuccessor): systemd waits for it at the next stop.
	sibling, err := systemd.StartSuccessor(cmd)
	if err != nil {
		return err
	}
	log.Info("successor started", zap.String("event", "zerodrop.successor"), zap.Int("pid", cmd.Process.Pid), zap.String("path", cmd.Path), zap.Bool("systemd_child", sibling))
	if systemd.NamespaceInit() {
		log.Warn("PID 1 of a PID namespace: the successor is our child, not systemd's, and this process stays the namespace's init after the handoff (Generation.Linger)",
			zap.String("event", "zerodrop.namespace_init"), zap.Int("pid", cmd.Process.Pid))
	}
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
