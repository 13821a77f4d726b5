package zerodrop

import (
	"net"
	"os"
	"os/exec"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
	"go.uber.org/zap"
)

// Config configures a generation, whatever it serves: Open and Run read it,
// and so do Serve (as Options.Config), grpcdrain.Serve and quicdrain.Serve.
// It holds only what every kind of server honours; what only an
// http.Server can do is in Options. The zero value takes fresh (or
// socket-activated) listeners without a handoff, stops on SIGTERM or
// SIGINT, and starts no successor. A package's knob keeps its one name
// there: Handoff is a handoff.Config.
type Config struct {
	// Handoff configures the handoff (package handoff): with Handoff.Path
	// set (a path in a directory nobody else can write, or "@name" in the
	// abstract namespace), a process started with the same Path inherits
	// our listeners, and we drain once it is ready; an empty Path means no
	// handoff. Handoff.Listen and Handoff.WarnOnMismatch configure every
	// listener, with or without a handoff (they are the socket table's:
	// package sockets); a nil Handoff.Logger is Logger. With Path set and
	// Listen.Migration left at its zero value, the tcp_migrate_req check is
	// off: a handoff needs no migration (a reuseport pool that rolls by
	// stopping members should set its own policy). Handoff.TicketKeys: see
	// Serve; set them for a server Serve does not run (Open, package
	// grpcdrain) and install them yourself (ticket.Keys.Install).
	Handoff handoff.Config
	// Signals stop this generation; default SIGTERM and SIGINT.
	// UpgradeSignals start a successor (Successor) when Handoff.Path and
	// Successor are set; default SIGHUP. NoSignals installs no signal
	// handler at all: ctx stops the generation, and Generation.Upgrade
	// starts a successor.
	UpgradeSignals, Signals []os.Signal
	NoSignals               bool
	// Successor returns the command that starts the next generation (not
	// started yet): ReExec for this executable again, with our arguments,
	// environment, stdout and stderr. Nil means no upgrade signal is
	// installed: a binary that runs itself in other roles is never
	// re-executed unasked. Under systemd it is started as systemd's child
	// (systemd.StartSuccessor), so that systemd waits for its drain at the
	// next stop.
	Successor func() *exec.Cmd
	// Delay keeps serving, with readiness failing (drain.Server.Delay;
	// grpcdrain's health service answers NOT_SERVING), this long after a
	// signal or ctx stops us, so that load balancers notice. A stop because
	// a successor took over has no delay: it serves the same sockets.
	Delay time.Duration
	// Grace bounds the drain, after Delay; default 30 s.
	Grace time.Duration
	// Logger receives what the generation does, and is Handoff.Logger and
	// Handoff.Listen.Logger where those are nil (Serve gives it to each
	// drain.Server too); nil means no logging.
	Logger *zap.Logger
	// OnListen, if set, is called once every listener is open, before any is
	// served (a handler that names the generation learns it here).
	OnListen func(generation uint64, addrs []net.Addr)
	// OnServing, if set, is called once every listener is served and the
	// predecessor (if any) and systemd (if it runs us) were told we are ready.
	OnServing func(generation uint64, addrs []net.Addr)
}
