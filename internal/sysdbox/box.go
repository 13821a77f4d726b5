package sysdbox

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// Systemd is the binary Boot runs as PID 1 (Debian's systemd package).
const Systemd = "/lib/systemd/systemd"

// Unit is what the box boots: basic.target (journald, dbus, tmpfiles, the
// sockets and timers of the machine's image), not multi-user.target, which
// would start every service the machine has enabled.
const Unit = "basic.target"

// The bounds on Boot and Close.
const (
	bootTimeout     = 90 * time.Second // until is-system-running is running or degraded
	poweroffTimeout = 60 * time.Second // orderly poweroff before cgroup.kill
	killTimeout     = 15 * time.Second // cgroup.kill until every process is gone
)

// sigPoweroff is SIGRTMIN+4 (glibc's SIGRTMIN is 34): systemd starts
// poweroff.target, and as a container's PID 1 then exits.
const sigPoweroff = syscall.Signal(38)

//go:embed setup.sh
var setupScript string

// Box is a real systemd running as PID 1 of its own PID, mount, network, UTS,
// IPC and cgroup namespaces, on an overlay of the machine's / whose writes go
// to a tmpfs. Boot starts it; Close ends it.
type Box struct {
	// PID is systemd's PID as the machine sees it (PID 1 inside).
	PID int
	// State is what systemctl is-system-running said once booted: "running",
	// or "degraded" when some unit of the image failed (Failed lists them).
	State string
	// Failed lists the failed units when State is "degraded".
	Failed string

	cmd       *exec.Cmd // unshare, in the machine's PID namespace
	done      chan struct{}
	out       *syncBuffer
	cgroup    string // the box's cgroup, a cgroup2 directory of the machine
	mountinfo []byte // the test process's mounts at Boot
	closed    sync.Once
	closeErr  error
}

// Boot starts a box and waits (at most 90 s) until its systemd is running or
// degraded. It skips the test for a non-root user, or when a tool is missing
// (systemd, unshare, nsenter, setpriv), and fails it in both cases when
// ZERODROP_REQUIRE_PRIVILEGED=1; any other failure to boot fails the test
// with the reason. The box is closed when the test ends (Close).
func Boot(tb testing.TB) *Box {
	tb.Helper()
	netnstest.RequirePrivileged(tb)
	if err := CheckTools(); err != nil {
		if os.Getenv(netnstest.EnvRequirePrivileged) == "1" {
			tb.Fatalf("%v, and %s=1 forbids skipping", err, netnstest.EnvRequirePrivileged)
		}
		tb.Skip(err)
	}
	b, err := Start(context.Background(), Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := b.Close(); err != nil {
			tb.Error(err)
		}
	})
	tb.Logf("sysdbox: systemd pid %d is %s", b.PID, b.State)
	if b.Failed != "" {
		tb.Logf("sysdbox: failed units:\n%s", b.Failed)
	}
	return b
}

// Options change the box Start boots.
type Options struct {
	// SharedNetwork keeps the caller's network namespace instead of giving
	// the box one of its own: a program that already runs in a namespace it
	// made (the restart benchmark's run child) loads the box's services
	// from its own threads. The box's systemd-sysctl then sets net.*
	// sysctls of that namespace.
	SharedNetwork bool
}

// CheckTools says which tool a box needs is missing, if one is.
func CheckTools() error {
	for _, tool := range []string{Systemd, "unshare", "nsenter", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("sysdbox needs %s (apt-get install systemd util-linux; .ci/run does): %w", tool, err)
		}
	}
	return nil
}

// Start boots a box for a program (Boot is for tests) and waits until its
// systemd is running or degraded, or ctx ends (at most 90 s). The caller
// must Close it; on error nothing of the box is left.
func Start(ctx context.Context, opts Options) (*Box, error) {
	if err := CheckTools(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, bootTimeout)
	defer cancel()
	b, err := start(opts)
	if err != nil {
		return nil, fmt.Errorf("sysdbox: boot: %w", err)
	}
	if err := b.waitRunning(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("sysdbox: boot: %w", err), b.Close())
	}
	return b, nil
}

// start creates the box's cgroup and starts unshare in it, which runs
// setup.sh as PID 1 of the new namespaces.
func start(opts Options) (*Box, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	cg, err := newCgroup()
	if err != nil {
		return nil, err
	}
	dir, err := os.Open(cg)
	if err != nil {
		os.Remove(cg)
		return nil, err
	}
	defer dir.Close()
	b := &Box{done: make(chan struct{}), out: new(syncBuffer), cgroup: cg, mountinfo: mi}
	args := []string{"--pid", "--fork", "--kill-child", "--mount", "--uts", "--ipc", "--cgroup", "--propagation", "private"}
	if !opts.SharedNetwork {
		args = append(args, "--net")
	}
	b.cmd = exec.Command("unshare", append(args, "sh", "-c", setupScript, "sysdbox", Systemd, Unit)...)
	b.cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	b.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go b.run(started)
	if err := <-started; err != nil {
		os.Remove(cg)
		return nil, fmt.Errorf("start unshare in %s: %w", cg, err)
	}
	return b, nil
}

// run starts unshare and waits for it on one locked OS thread: Pdeathsig
// kills unshare (and with it the box) when the thread that started it exits,
// so no other goroutine may end that thread while the box runs.
func (b *Box) run(started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	err := b.cmd.Start()
	started <- err
	if err == nil {
		b.cmd.Wait()
	}
	close(b.done)
}

// newCgroup makes a cgroup2 directory for the box below this process's own
// cgroup; the box's cgroup namespace has it as its root.
func newCgroup() (string, error) {
	mnt, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var own string
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("no cgroup2 entry in /proc/self/cgroup")
	}
	// A random suffix, not our PID alone: in a PID namespace every run
	// child of the restart benchmark is PID 1.
	cg, err := os.MkdirTemp(filepath.Join(mnt, own), fmt.Sprintf("zerodrop-sysdbox-%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("create the box's cgroup: %w", err)
	}
	return cg, nil
}

// cgroup2Mount finds the machine's cgroup2 hierarchy (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid machine).
func cgroup2Mount() (string, error) {
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(mi), "\n") {
		f := strings.Fields(l)
		for i := range f {
			if f[i] == "-" && i+1 < len(f) && f[i+1] == "cgroup2" && len(f) > 4 {
				return f[4], nil
			}
		}
	}
	return "", errors.New("no cgroup2 hierarchy mounted")
}

// waitRunning finds PID 1 of the box and waits until systemd has booted.
func (b *Box) waitRunning(ctx context.Context) error {
	pid, err := b.init(ctx)
	if err != nil {
		return err
	}
	b.PID = pid
	for {
		out, err := b.Exec(ctx, "systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(string(out))
		if i := strings.LastIndexByte(state, '\n'); i >= 0 {
			state = state[i+1:]
		}
		switch state {
		case "running":
			b.State = state
			return nil
		case "degraded":
			b.State = state
			failed, _ := b.Exec(ctx, "systemctl", "--failed", "--no-legend", "--plain")
			b.Failed = strings.TrimSpace(string(failed))
			return nil
		case "maintenance", "stopping": // "offline": not answering yet
			return fmt.Errorf("systemd is %s:\n%s", state, b.out)
		}
		select {
		case <-b.done:
			return fmt.Errorf("the box exited (%v) while booting:\n%s", b.cmd.ProcessState, b.out)
		case <-ctx.Done():
			return fmt.Errorf("systemd not running after %s (last: %q, %v):\n%s", bootTimeout, state, err, b.out)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// init waits until unshare's child, PID 1 of the box, runs systemd.
func (b *Box) init(ctx context.Context) (int, error) {
	unshare := b.cmd.Process.Pid
	children := fmt.Sprintf("/proc/%d/task/%d/children", unshare, unshare)
	for {
		if s, err := os.ReadFile(children); err == nil && len(bytes.Fields(s)) == 1 {
			pid, _ := strconv.Atoi(string(bytes.Fields(s)[0]))
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && string(comm) == "systemd\n" {
				return pid, nil
			}
		}
		select {
		case <-b.done:
			return 0, fmt.Errorf("the box's setup failed (%v):\n%s", b.cmd.ProcessState, b.out)
		case <-ctx.Done():
			return 0, fmt.Errorf("systemd did not start within %s:\n%s", bootTimeout, b.out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// syncBuffer is the box's console output, written by exec's copying goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
