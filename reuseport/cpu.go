package reuseport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"golang.org/x/sys/unix"
)

// Member.CPU values that are not a CPU number.
const (
	// CPUNone: the member does not set SO_INCOMING_CPU (the kernel's -1).
	CPUNone = -1
	// CPUUnknown: no process holding the member let us read it.
	CPUUnknown = -2
)

// ErrNoCPUPreference is wrapped by CPUPreference's error on a kernel whose
// reuseport pick ignores SO_INCOMING_CPU (before Linux 6.1).
var ErrNoCPUPreference = fmt.Errorf("%w: the reuseport pick prefers the member of the SYN's CPU (SO_INCOMING_CPU) only since Linux 6.1", ErrNotSupported)

// CPUPreference returns nil when the running kernel's reuseport pick prefers
// a member whose SO_INCOMING_CPU is the CPU handling the SYN (Linux 6.1,
// commit b261eda84ec1), and an error wrapping ErrNoCPUPreference otherwise.
// It decides by the release uname reports: a backport to an older kernel is
// not recognised (it fails closed).
func CPUPreference() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return os.NewSyscallError("uname", err)
	}
	rel := unix.ByteSliceToString(u.Release[:])
	if !atLeast(rel, 6, 1) {
		return fmt.Errorf("%w (this is %s)", ErrNoCPUPreference, rel)
	}
	return nil
}

// atLeast reports whether release ("6.18.44-...") is major.minor or later.
func atLeast(release string, major, minor int) bool {
	f := strings.FieldsFunc(release, func(r rune) bool { return r < '0' || r > '9' })
	if len(f) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(f[0])
	mi, err2 := strconv.Atoi(f[1])
	return err1 == nil && err2 == nil && (ma > major || ma == major && mi >= minor)
}

// OnlineCPUs returns the online CPUs (/sys/devices/system/cpu/online), in
// ascending order: the CPUs that may handle a SYN, whatever the caller's
// affinity or cpuset.
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("online cpus: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("online cpus: %w", err)
	}
	return cpus, nil
}

// parseCPUList parses a kernel CPU list such as "0-3,8,10-11".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for r := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(r, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("bad cpu list %q", s)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// ListenPerCPU opens one TCP listener per online CPU on address, each with
// SO_INCOMING_CPU set to its CPU (c.Options.IncomingCPU is ignored), in CPU
// order, so that on Linux 6.1+ the group covers every CPU and each listener
// gets the connections whose SYN its CPU handles. With port 0 the first
// listener picks the port and the others join it. Serve each listener (they
// are ordinary Listeners; a drain.Server serves one, so give each its own,
// sharing the handler, with drain.Options.StepOut to step each out of the
// group before its stop). On error nothing stays open. The caller owns the
// listeners. It needs no privilege; on older kernels the listeners share
// connections by hash as any group does.
func (c *Config) ListenPerCPU(ctx context.Context, network, address string) ([]*Listener, error) {
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, neterr.OpText("listen", network, address, err)
	}
	var ls []*Listener
	for _, cpu := range cpus {
		cfg := *c
		cfg.Options.IncomingCPU = &cpu
		l, err := cfg.Listen(ctx, network, address)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return nil, err
		}
		if len(ls) == 0 {
			host, _, _ := net.SplitHostPort(address)
			address = net.JoinHostPort(host, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// SetIncomingCPU sets SO_INCOMING_CPU on a live socket (CPUNone clears it),
// without taking ownership. No privilege is needed.
func SetIncomingCPU(c syscall.Conn, cpu int) error {
	return linux.Control(c, func(fd int) error {
		return os.NewSyscallError("setsockopt SO_INCOMING_CPU", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_INCOMING_CPU, cpu))
	})
}

// ReadIncomingCPU reads SO_INCOMING_CPU of a live socket: for a listener,
// the value it set, or CPUNone. It does not take ownership.
func ReadIncomingCPU(c syscall.Conn) (int, error) {
	cpu := CPUNone
	err := linux.Control(c, func(fd int) (err error) {
		cpu, err = linux.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_INCOMING_CPU)
		return os.NewSyscallError("getsockopt SO_INCOMING_CPU", err)
	})
	return cpu, err
}

// ReadCPUs fills each member's CPU (Inspect leaves it CPUUnknown) from the
// first of its processes that lets us: through a copy of that process's fd
// (pidfd_getfd, Linux 5.6; allowed as ptrace is: the same UID unless Yama's
// ptrace_scope restricts it to descendants, or CAP_SYS_PTRACE), since
// sock_diag does not report SO_INCOMING_CPU. The copy lives for one
// getsockopt; a holder that closes the socket meanwhile leaves its last
// close to us, microseconds later. Members it cannot read stay CPUUnknown;
// CheckCovered's error tells those whose every listed holder had exited or
// let go of them by then (a new Inspect no longer lists those holders).
func (g *Group) ReadCPUs() {
	for i := range g.Members {
		m := &g.Members[i]
		m.CPU = CPUUnknown
		m.notHeld = len(m.Processes) > 0
		for _, p := range m.Processes {
			cpu, err := sockdiag.IncomingCPU(p.PID, m.Inode)
			if err == nil {
				m.CPU = cpu
				m.notHeld = false
				break
			}
			m.notHeld = m.notHeld && errors.Is(err, sockdiag.ErrNotHeld)
		}
	}
}

// PrefersCPU reports whether a member sets SO_INCOMING_CPU: then (Linux 6.1+)
// the group's pick prefers, for each SYN, a member of the CPU handling it.
func (g *Group) PrefersCPU() bool {
	return slices.ContainsFunc(g.Members, func(m Member) bool { return m.CPU >= 0 })
}

// Uncovered returns the CPUs of online that no member of g prefers, leaving
// out the members whose inode is in skip. A member whose CPU is CPUUnknown
// covers nothing. The kernel gives a SYN handled on an uncovered CPU to the
// first listening member from its hash position, whatever that member's CPU.
func (g *Group) Uncovered(online []int, skip ...uint64) []int {
	covered := map[int]bool{}
	for _, m := range g.Members {
		if m.CPU >= 0 && !slices.Contains(skip, m.Inode) {
			covered[m.CPU] = true
		}
	}
	var out []int
	for _, c := range online {
		if !covered[c] {
			out = append(out, c)
		}
	}
	return out
}

// unknownCPUs counts the members, other than skip, whose CPU is unknown,
// and among them those whose listed holders no longer held them.
func (g *Group) unknownCPUs(skip ...uint64) (unknown, notHeld int) {
	for _, m := range g.Members {
		if m.CPU == CPUUnknown && !slices.Contains(skip, m.Inode) {
			unknown++
			if m.notHeld {
				notHeld++
			}
		}
	}
	return unknown, notHeld
}

// ErrUncovered is matched by UncoveredError.
var ErrUncovered = errors.New("online CPUs not covered by the reuseport group")

// UncoveredError names the online CPUs no member of a group (other than the
// ones left out) prefers with SO_INCOMING_CPU.
type UncoveredError struct {
	Addr    string // the group's address
	CPUs    []int  // online CPUs no member prefers
	Unknown int    // members whose CPU could not be read (they count as covering nothing)
	// NotHeld counts those of Unknown whose every listed holder had exited,
	// or closed its fd, by the time ReadCPUs read it: a new Inspect no
	// longer lists those holders (the member is gone, or another process
	// holds it now, as a handoff's successor does).
	NotHeld int
}

func (e *UncoveredError) Error() string {
	s := fmt.Sprintf("%s: %v: cpus %v", e.Addr, ErrUncovered, e.CPUs)
	if e.NotHeld > 0 {
		s += fmt.Sprintf(" (%d members' SO_INCOMING_CPU could not be read: their holders exited or let go of them while the group was read)", e.NotHeld)
	}
	if n := e.Unknown - e.NotHeld; n > 0 {
		s += fmt.Sprintf(" (%d members' SO_INCOMING_CPU could not be read: their holders are another user's, which needs root or CAP_SYS_PTRACE, or none could be found)", n)
	}
	return s
}

// Is reports whether target is ErrUncovered.
func (e *UncoveredError) Is(target error) bool { return target == ErrUncovered }

// CheckCovered returns nil when the members of g other than skip cover every
// online CPU, and an *UncoveredError otherwise.
func (g *Group) CheckCovered(addr string, online []int, skip ...uint64) error {
	if u := g.Uncovered(online, skip...); len(u) > 0 {
		unknown, notHeld := g.unknownCPUs(skip...)
		return &UncoveredError{Addr: addr, CPUs: u, Unknown: unknown, NotHeld: notHeld}
	}
	return nil
}
