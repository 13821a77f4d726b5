package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	"github.com/zerodrop/zerodrop/internal/sysdbox"
	"golang.org/x/sys/unix"
)

// pid1Unit is the service the real systemd restarts: Type=notify, no socket
// unit, the listener kept in the fd store across systemctl restart (the
// worker stores it as "http" at its first start, which listens). systemd
// counts every start against StartLimitBurst= (5 in 10 s): off.
const pid1Unit = `[Unit]
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
ExecStart=%s
Environment=%s=systemd %s=%s
FileDescriptorStoreMax=4
TimeoutStopSec=%d
`

const (
	pid1Service = "zd-bench.service"
	pid1Bin     = "/opt/zerodrop-bench/zdworker"
)

// pid1Contender is zd-systemd under the real systemd: Debian's systemd runs
// as PID 1 of a box (internal/sysdbox) that shares the run's network
// namespace, and each restart is systemctl restart, which returns once the
// new process said READY=1.
type pid1Contender struct {
	box *sysdbox.Box
}

func (c *pid1Contender) start(ctx context.Context, env *runEnv) (err error) {
	if err := mountProc(); err != nil {
		return err
	}
	if c.box, err = sysdbox.Start(ctx, sysdbox.Options{SharedNetwork: true}); err != nil {
		return err
	}
	if err := c.box.CopyIn(env.binFor("systemd"), pid1Bin); err != nil {
		return err
	}
	unit := fmt.Sprintf(pid1Unit, pid1Bin, worker.EnvRole, worker.EnvAddr, env.addr,
		int((worker.ShutdownTimeout + exitTimeout).Seconds()))
	if err := c.box.Install(ctx, pid1Service, unit); err != nil {
		return err
	}
	if _, err := c.box.Systemctl(ctx, "start", pid1Service); err != nil {
		return c.failed(ctx, err)
	}
	if n, err := c.box.Show(ctx, pid1Service, "NFileDescriptorStore"); err != nil || n != "1" {
		return c.failed(ctx, errors.Join(fmt.Errorf("fd store holds %q after the first start, want 1", n), err))
	}
	return nil
}

func (c *pid1Contender) restart(ctx context.Context, mark func(string)) error {
	mark("restart")
	if _, err := c.box.Systemctl(ctx, "restart", pid1Service); err != nil {
		return c.failed(ctx, err)
	}
	return nil
}

func (c *pid1Contender) stop(ctx context.Context) error {
	if c.box == nil {
		return nil
	}
	var err error
	if j, jerr := c.box.Journal(ctx, pid1Service); jerr == nil {
		// What a worker wrote to stderr (notable drains) is in the journal.
		for _, l := range strings.Split(j, "\n") {
			if strings.HasPrefix(l, "worker ") || strings.Contains(l, "drain") {
				fmt.Fprintln(os.Stderr, "zd-systemd-pid1:", l)
			}
		}
	}
	if _, serr := c.box.Systemctl(ctx, "stop", pid1Service); serr != nil {
		err = serr
	}
	return errors.Join(err, c.box.Close())
}

// failed adds the service's journal to err.
func (c *pid1Contender) failed(ctx context.Context, err error) error {
	j, _ := c.box.Journal(ctx, pid1Service)
	return fmt.Errorf("%w\njournal of %s:\n%s", err, pid1Service, j)
}

// mountProc mounts the run child's own /proc: the box's PIDs (systemd's,
// as this process sees it) must be those of /proc, and the run child is in
// a PID namespace of its own. Its mounts are made private first, so that
// nothing propagates to the machine; they vanish with the namespace.
func mountProc() error {
	if err := privateMounts("the real systemd"); err != nil {
		return err
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return &os.PathError{Op: "mount proc", Path: "/proc", Err: err}
	}
	return nil
}
