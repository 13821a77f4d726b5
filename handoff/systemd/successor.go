package systemd

import (
	"os"
	"os/exec"
	"syscall"
)

// StartSuccessor starts cmd, the service's next generation, and reports
// whether it started it as a sibling: when this process runs under systemd
// (NOTIFY_SOCKET is set), cmd is started as a child of this process's parent,
// the service manager (clone(2) with CLONE_PARENT), not of this process.
// Otherwise it is started as this process's child, as cmd.Start does.
//
// A successor makes itself the service's main process (MainPID), and systemd
// takes a main process that is not its child for an "alien" one it cannot
// wait for: at the next stop or restart it sends SIGTERM and, not waiting
// for the process to exit, SIGKILL right after, so the drain never runs and
// the connections in flight are reset (systemd 252; examples/systemd's
// TestSystemdReloadThenRestart). It decides once, when MAINPID= names the
// process, so the successor must be its child from the start: repeating
// MAINPID= once the predecessor has exited changes nothing.
//
// A sibling's exit is systemd's to reap: cmd.Wait returns ECHILD at once;
// watch the successor through the handoff (or a pidfd) instead. cmd's own
// SysProcAttr, if set, is kept, with CLONE_PARENT added.
//
// As PID 1 of a PID namespace (a container's main process: podman
// --sdnotify=container, systemd-nspawn) there is no sibling to start: clone(2)
// refuses CLONE_PARENT to an init process (EINVAL), so StartSuccessor starts a
// plain child there and returns false; NamespaceInit tells the caller, to log
// it. Such a successor lives only as long as this process: when the init of
// a PID namespace exits, the kernel kills every process in it
// (pid_namespaces(7)). An in-place upgrade of a container's main process
// therefore needs an init in front of it (podman run --init, tini,
// catatonit), or this process to stay and reap after its drain.
//
// sibling is false whenever err is not nil: nothing was started.
func StartSuccessor(cmd *exec.Cmd) (sibling bool, err error) {
	if os.Getenv(EnvNotifySocket) == "" || NamespaceInit() {
		return false, cmd.Start()
	}
	attr := &syscall.SysProcAttr{}
	if cmd.SysProcAttr != nil {
		a := *cmd.SysProcAttr
		attr = &a
	}
	attr.Cloneflags |= syscall.CLONE_PARENT
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return false, err
	}
	return true, nil
}

// NamespaceInit reports whether this process is PID 1 of its PID namespace
// (getpid(2) answers in the caller's own namespace): StartSuccessor then
// starts a plain child even under systemd, and that child is killed by the
// kernel when this process exits.
func NamespaceInit() bool { return os.Getpid() == 1 }
