package systemd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestStartSuccessor: a process under systemd (NOTIFY_SOCKET set) starts its
// successor as its parent's child, a sibling, keeping the command's own
// SysProcAttr (Setpgid here); cmd.Wait then says ECHILD, the exit being the
// parent's to reap. Without NOTIFY_SOCKET the successor is its child, as
// cmd.Start makes it. The helper process plays the predecessor; this test is
// its parent, systemd's place.
func TestStartSuccessor(t *testing.T) {
	netnstest.CheckLeaks(t)
	for _, underSystemd := range []bool{true, false} {
		t.Run(map[bool]string{true: "systemd", false: "plain"}[underSystemd], func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), "ZERODROP_TEST_HELPER=start-successor")
			if underSystemd {
				cmd.Env = append(cmd.Env, EnvNotifySocket+"=@zerodrop-test-unused")
			}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("helper: %v %s", err, out)
			}
			var helper, succ, ppid, pgid int
			var sibling bool
			var waitErr string
			if _, err := fmt.Sscanf(string(out), "helper %d successor %d ppid %d pgid %d sibling %t wait %q", &helper, &succ, &ppid, &pgid, &sibling, &waitErr); err != nil {
				t.Fatalf("helper said %q: %v", out, err)
			}
			if underSystemd {
				// Ours to end and reap, by its pid.
				syscall.Kill(succ, syscall.SIGKILL)
				var ws syscall.WaitStatus
				if _, err := syscall.Wait4(succ, &ws, 0, nil); err != nil {
					t.Errorf("reaping the successor %d: %v", succ, err)
				}
			}
			want := map[bool]int{true: os.Getpid(), false: helper}[underSystemd]
			t.Logf("helper %d started %d: parent %d, group %d, sibling %v, Wait: %s", helper, succ, ppid, pgid, sibling, waitErr)
			if ppid != want || sibling != underSystemd || pgid != succ {
				t.Errorf("successor's parent %d (want %d), sibling %v (want %v), process group %d (want its own, %d)", ppid, want, sibling, underSystemd, pgid, succ)
			}
			if underSystemd && !strings.Contains(waitErr, "no child processes") {
				t.Errorf("cmd.Wait on a sibling: %q, want ECHILD", waitErr)
			}
		})
	}
}

// TestStartSuccessorPIDNamespaceInit: a process under systemd that is PID 1
// of its own PID namespace (podman --sdnotify=container, systemd-nspawn: the
// server is the container's main process) cannot start a sibling, since
// clone(2) refuses CLONE_PARENT to an init process (EINVAL). StartSuccessor
// then starts a plain child and says so (sibling false, no error): the
// successor runs in its own process group, and is the helper's child (its
// Wait reports the kill, where a sibling's would say ECHILD).
func TestStartSuccessorPIDNamespaceInit(t *testing.T) {
	netnstest.RequirePrivileged(t) // CLONE_NEWPID needs CAP_SYS_ADMIN
	netnstest.CheckLeaks(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ZERODROP_TEST_HELPER=start-successor", EnvNotifySocket+"=@zerodrop-test-unused")
	// PID 1 of a new PID namespace; when it exits the kernel kills the rest of
	// the namespace, the successor included.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			out = append(out, ee.Stderr...)
		}
		t.Fatalf("helper as PID 1 of a new PID namespace: %v: %s", err, out)
	}
	var helper, succ, ppid, pgid int
	var sibling bool
	var waitErr string
	if _, err := fmt.Sscanf(string(out), "helper %d successor %d ppid %d pgid %d sibling %t wait %q", &helper, &succ, &ppid, &pgid, &sibling, &waitErr); err != nil {
		t.Fatalf("helper said %q: %v", out, err)
	}
	t.Logf("helper %d started %d: group %d, sibling %v, Wait: %s", helper, succ, pgid, sibling, waitErr)
	if helper != 1 {
		t.Fatalf("helper's pid %d, want 1 (the namespace's init)", helper)
	}
	if sibling || pgid != succ || waitErr != "signal: killed" {
		t.Errorf("sibling %v (want false), process group %d (want its own, %d), Wait %q (want %q: the helper's own child)",
			sibling, pgid, succ, waitErr, "signal: killed")
	}
}

// TestSuccessorDiesWithNamespaceInit pins down the cost StartSuccessor's doc
// gives for its fallback: the successor PID 1 of a PID namespace starts is
// killed by the kernel as soon as PID 1 exits. The helper (PID 1) starts
// "sleep 30" sharing its stdout and exits at once without ending it; the
// pipe reaches EOF, well before 30 s, only if the kernel killed the sleep.
func TestSuccessorDiesWithNamespaceInit(t *testing.T) {
	netnstest.RequirePrivileged(t) // CLONE_NEWPID needs CAP_SYS_ADMIN
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "ZERODROP_TEST_HELPER=start-successor-and-exit", EnvNotifySocket+"=@zerodrop-test-unused")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 10 * time.Second // a surviving sleep keeps the pipe open this long
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrWaitDelay) {
		t.Fatalf("the successor outlived its namespace's PID 1 (%s)", out)
	}
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	if !strings.HasPrefix(string(out), "started ") {
		t.Fatalf("helper said %q", out)
	}
	t.Logf("helper %s; its exit ended the successor", strings.TrimSpace(string(out)))
}

// helperStartSuccessorAndExit starts "sleep 30" with StartSuccessor, its
// stdout ours, says so and exits without ending it.
func helperStartSuccessorAndExit() {
	cmd := exec.Command("sleep", "30")
	cmd.Stdout = os.Stdout
	sibling, err := StartSuccessor(cmd)
	if err != nil {
		fatal("start: sibling %v: %v", sibling, err)
	}
	fmt.Printf("started successor %d, sibling %v, as pid %d\n", cmd.Process.Pid, sibling, os.Getpid())
}

// A successor that cannot be started is no sibling: StartSuccessor returns
// false with the error, under systemd as outside it.
func TestStartSuccessorFails(t *testing.T) {
	for _, env := range []string{"@zerodrop-test-unused", ""} {
		t.Setenv(EnvNotifySocket, env)
		cmd := exec.Command(filepath.Join(t.TempDir(), "missing"))
		sibling, err := StartSuccessor(cmd)
		if sibling || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("NOTIFY_SOCKET=%q: StartSuccessor of a missing binary = %v, %v; want false and an error matching fs.ErrNotExist", env, sibling, err)
		}
	}
}

// helperStartSuccessor starts "sleep 30" with StartSuccessor and Setpgid,
// says what the kernel says of it, and, when it is its child, ends it. As
// PID 1 of a PID namespace it asks the kernel for the group (the /proc it
// sees is its parent namespace's) and leaves ppid 0.
func helperStartSuccessor() {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sibling, err := StartSuccessor(cmd)
	if err != nil {
		fatal("start: sibling %v: %v", sibling, err)
	}
	pid := cmd.Process.Pid
	var ppid, pgid int
	if os.Getpid() == 1 {
		pgid, err = syscall.Getpgid(pid)
	} else {
		ppid, pgid, err = parentAndGroup(pid)
	}
	if err != nil {
		fatal("%v", err)
	}
	waitErr := "not waited"
	if sibling {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			waitErr = fmt.Sprint(err)
		case <-time.After(5 * time.Second):
			waitErr = "Wait blocked"
		}
	} else {
		cmd.Process.Kill()
		waitErr = fmt.Sprint(cmd.Wait())
	}
	fmt.Printf("helper %d successor %d ppid %d pgid %d sibling %t wait %q\n", os.Getpid(), pid, ppid, pgid, sibling, waitErr)
}

// parentAndGroup reads a process's parent and process group from
// /proc/PID/stat (the fields after the command's closing parenthesis).
func parentAndGroup(pid int) (ppid, pgid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b)[i+1:]) // state, ppid, pgrp, ...
	if i < 0 || len(f) < 3 {
		return 0, 0, errors.New("unexpected " + string(b))
	}
	ppid, err = strconv.Atoi(f[1])
	if err == nil {
		pgid, err = strconv.Atoi(f[2])
	}
	return ppid, pgid, err
}
