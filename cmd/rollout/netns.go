package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// enterNamespace runs this program again as the runner, in a new network
// namespace (and, without root, a new user namespace that maps our UID to
// root, which gives the runner CAP_NET_ADMIN over its network namespace
// only). It forwards SIGTERM, waits for the runner and returns its status.
func enterNamespace(args []string, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "rollout: find own executable: %v\n", err)
		return exitError
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), envRole+"="+roleRunner, envUserNS+"="+strconv.FormatBool(os.Geteuid() != 0))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, stdout, stderr
	cmd.SysProcAttr = namespaceAttr(os.Geteuid(), os.Getegid())

	// Ctrl-C reaches the whole process group: the runner handles it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, namespaceHelp(err))
		return exitError
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if s == syscall.SIGTERM {
					cmd.Process.Signal(s)
				}
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return ee.ExitCode()
	default:
		fmt.Fprintf(stderr, "rollout: runner: %v\n", err)
		return exitError
	}
}

// envUserNS tells the runner whether it runs in a user namespace of its own.
const envUserNS = "ZERODROP_ROLLOUT_USERNS"

// namespaceAttr returns the clone flags for the runner: a new network
// namespace, a new mount namespace (for a bpf filesystem that vanishes with
// it), and a user namespace unless we are root. The runner dies with us.
func namespaceAttr(uid, gid int) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	return attr
}

// namespaceHelp explains why the runner could not start.
func namespaceHelp(err error) string {
	msg := fmt.Sprintf("rollout: cannot create a private network namespace: %v\n", err)
	if os.Geteuid() == 0 {
		return msg + "Even root needs CAP_SYS_ADMIN for that; in a container, run it with --privileged or --cap-add SYS_ADMIN,NET_ADMIN."
	}
	return msg + `rollout changes net.ipv4.tcp_migrate_req and opens servers, so it runs in a network
namespace of its own and leaves this machine's settings alone. Without root it needs an
unprivileged user namespace, which this system refuses. Either run it as root:
    sudo env "PATH=$PATH" go run ./cmd/rollout
or allow user namespaces (user.max_user_namespaces > 0; on Ubuntu 24.04 and later also
kernel.apparmor_restrict_unprivileged_userns=0).`
}

// mountBPF mounts a bpf filesystem on a new directory for the ebpf strategy's
// pins. It must run in the runner's own mount namespace: it first makes every
// mount there private, so nothing propagates to the machine's namespace, and
// everything vanishes with the namespace even if cleanup never runs.
func mountBPF() (dir string, cleanup func(), err error) {
	if os.Getenv(envUserNS) == "true" {
		return "", nil, errors.New("needs root: loading an SK_REUSEPORT program needs CAP_BPF and CAP_NET_ADMIN in the initial user namespace")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", nil, &os.PathError{Op: "make mounts private", Path: "/", Err: err}
	}
	if dir, err = os.MkdirTemp("", "zerodrop-bpffs-"); err != nil {
		return "", nil, err
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		os.Remove(dir)
		return "", nil, &os.PathError{Op: "mount bpf", Path: dir, Err: err}
	}
	return dir, func() {
		unix.Unmount(dir, unix.MNT_DETACH)
		os.Remove(dir)
	}, nil
}
