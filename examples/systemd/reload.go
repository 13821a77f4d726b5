package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"golang.org/x/sys/unix"
)

// newUpgrader connects to the predecessor serving -socket, if any; it returns
// nil without -socket (no reload). An inherited socket whose options differ
// from reuseport's defaults is refused, unless -ignore-options accepted a
// difference at the first start. Each handoff to a successor is recorded in
// hub (whose generation is then the handoff's, without -generation's offset).
func newUpgrader(ctx context.Context, c *config, hub *stats.Hub) (*handoff.Upgrader, error) {
	if c.socket == "" {
		return nil, nil
	}
	return handoff.New(ctx, handoff.Config{Path: c.socket, WarnOnMismatch: c.ignore != "", OnHandoff: hub.HandoffHook()})
}

// generationOf is the handoff generation: 1 for the first process, or without
// -socket.
func generationOf(u *handoff.Upgrader) uint64 {
	if u == nil {
		return 1
	}
	return u.Generation()
}

// listenHandoff takes the listener through u: the predecessor's, else
// systemd's (checked like listen checks it), else a fresh one on -addr.
func listenHandoff(ctx context.Context, c *config, u *handoff.Upgrader, act *systemd.Activation) (net.Listener, string, error) {
	how := "listened"
	switch {
	case u.Generation() > 1:
		how = "inherited"
	case offers(act, c.name):
		how = "from systemd"
	}
	l, err := u.Listen(ctx, c.name, "tcp", c.addr)
	if err != nil || how != "from systemd" {
		return l, how, err
	}
	if err := systemd.CheckOptions(ctx, l.(syscall.Conn), &reuseport.Config{}, ignoreOptions(c)...); err != nil {
		l.Close()
		return nil, "", err
	}
	return l, how, nil
}

// offers reports whether systemd passed an fd named name (Available lists
// "name=network:address").
func offers(act *systemd.Activation, name string) bool {
	return slices.ContainsFunc(act.Available(), func(a string) bool { return strings.HasPrefix(a, name+"=") })
}

// announce tells the predecessor (if any) and systemd that we serve. A
// successor first makes itself the main process (MAINPID=, which needs
// NotifyAccess=all), so that systemd does not take the predecessor's exit
// for the service's; if the handoff then fails, the predecessor, which keeps
// serving, gets the title back.
func announce(n *systemd.Notifier, u *handoff.Upgrader, status string) error {
	if u == nil {
		return n.Ready(status)
	}
	if u.Generation() > 1 {
		if err := n.MainPID(os.Getpid()); err != nil {
			return err
		}
	}
	if err := u.Ready(); err != nil {
		err = fmt.Errorf("handoff ready: %w", err)
		if u.Generation() > 1 {
			err = errors.Join(err, n.MainPID(os.Getppid()))
		}
		return err
	}
	return n.Ready(status)
}

// watchdog pings systemd when it asks for it. A successor pings for the
// service whatever WATCHDOG_PID says: MAINPID= gave it the watchdog.
func watchdog(ctx context.Context, n *systemd.Notifier, u *handoff.Upgrader) (*systemd.Watchdog, error) {
	if generationOf(u) == 1 {
		return n.StartWatchdog(ctx)
	}
	iv, err := systemd.WatchdogInterval()
	if err != nil {
		return nil, err
	}
	return n.Pinger(ctx, iv), nil
}

// generation is one serving process.
type generation struct {
	n      *systemd.Notifier
	u      *handoff.Upgrader // nil without -socket
	srv    *drain.Server
	w      *systemd.Watchdog // nil: no pings
	gen    int
	status string
}

// wait serves until ctx ends (STOPPING=1, drain), a successor serves (drain
// only: the service goes on), or Serve fails. Each value from hup starts a
// successor; if it cannot start or exits early, READY=1 ends the reload.
func wait(ctx context.Context, c *config, g *generation, hup <-chan os.Signal, served <-chan error, out io.Writer) error {
	failed := make(chan error, 1)
	var exit <-chan struct{}
	if g.u != nil {
		exit = g.u.Exit()
	}
	for {
		select {
		case <-hup:
			if err := g.reload(c, failed, out); err != nil {
				fmt.Fprintf(out, "generation %d: successor not started: %v\n", g.gen, err)
				g.n.Ready(g.status)
			}
		case err := <-failed:
			fmt.Fprintf(out, "generation %d: successor exited before serving: %v\n", g.gen, err)
			g.n.Ready(g.status)
		case <-exit:
			fmt.Fprintf(out, "generation %d: successor ready, draining\n", g.gen)
			g.w.Stop() // the successor pings now; ours would hide a hung one
			return drainServer(g.srv, c.grace, out)
		case <-ctx.Done():
			return shutdown(g.n, g.srv, g.gen, c.grace, out)
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
	}
}

// reload sends RELOADING=1 and starts this binary again with our arguments;
// the successor shares our stdout and stderr and outlives us. If it exits
// while we still run, its status goes to failed.
func (g *generation) reload(c *config, failed chan<- error, out io.Writer) error {
	if g.u == nil {
		return errors.New("reload needs -socket")
	}
	if err := g.n.Reloading(fmt.Sprintf("generation %d starting generation %d", g.gen, g.gen+1)); err != nil {
		fmt.Fprintf(out, "generation %d: %v\n", g.gen, err)
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, c.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	// Under systemd, the successor is systemd's child, not ours, or systemd
	// would SIGKILL it at the next stop before it drained.
	sibling, err := systemd.StartSuccessor(cmd)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "generation %d: started successor pid %d\n", g.gen, cmd.Process.Pid)
	report := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	if sibling {
		return watchExit(cmd.Process.Pid, report)
	}
	go func() {
		err := cmd.Wait()
		if err == nil {
			err = errors.New("exit status 0")
		}
		report(err)
	}()
	return nil
}

// watchExit calls report when the process pid, which is not our child,
// exits: its exit status is its parent's to read, so report gets only that
// it exited.
func watchExit(pid int, report func(error)) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return os.NewSyscallError("pidfd_open", err)
	}
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		report(fmt.Errorf("successor pid %d exited", pid))
	}()
	return nil
}
