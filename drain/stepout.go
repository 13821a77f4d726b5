package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// ErrSteered is why a stop with Options.StepOut does not step out when
// Options.Steerer is set: a reuseport eBPF program picks the group's members,
// and the kernel then never consults SO_INCOMING_CPU.
var ErrSteered = errors.New("a reuseport eBPF program (Options.Steerer) picks the members: SO_INCOMING_CPU is not consulted")

// Bounds of the wait for the handshakes in flight when we stepped out: the
// first poll interval and the longest; ctx bounds the wait in time.
const (
	handshakePollMin  = 200 * time.Microsecond
	handshakePollMax  = 10 * time.Millisecond
	maxHandshakePolls = 1 << 14
)

// stepOutMu serialises the step-outs of this process: two members stopping
// at once never both count on the other to cover a CPU.
var stepOutMu sync.Mutex

// tryStepOut steps our socket out of the group's pick when it may (see
// stepOut): then the stop is MethodStepOut. Otherwise r.StepOutRefused says
// why and the stop keeps the method choose gave.
func (l *Listener) tryStepOut(ctx context.Context, r *Report, id identity) {
	err := l.stepOut(ctx, id, r)
	if err != nil {
		r.StepOutRefused = err.Error()
		r.Why += "; not stepped out first: " + err.Error()
		return
	}
	r.Why = fmt.Sprintf("stepped out of the reuseport pick (SO_INCOMING_CPU=-1): the other members cover every online CPU; then (%s)", r.Why)
	r.Method = MethodStepOut
}

// stepOut clears our SO_INCOMING_CPU when the rest of the group covers every
// online CPU, so that (Linux 6.1+) the kernel picks us for no new SYN. It
// refuses with a Steerer (ErrSteered), on a kernel before 6.1
// (reuseport.ErrNoCPUPreference) and when a CPU is left uncovered
// (*reuseport.UncoveredError): then it puts our old value back.
func (l *Listener) stepOut(ctx context.Context, id identity, r *Report) error {
	if l.opts.Steerer != nil {
		return ErrSteered
	}
	if id.err != nil {
		return id.err
	}
	if !id.reuse {
		return errors.New("the socket has no SO_REUSEPORT: no group to step out of")
	}
	if err := reuseport.CPUPreference(); err != nil {
		return err
	}
	online, err := reuseport.OnlineCPUs()
	if err != nil {
		return err
	}
	addr := netipString(l.tl.Addr().(*net.TCPAddr).AddrPort())
	covered := func() error { return l.covered(ctx, addr, online, id.ino, r) }
	// Step out first and check after: a process stepping another member
	// out at the same time then sees our change, or we see its. While we
	// check, an uncovered CPU's SYNs may still reach us, and we still
	// listen.
	stepOutMu.Lock()
	defer stepOutMu.Unlock()
	old, err := reuseport.ReadIncomingCPU(l.tl)
	if err != nil {
		return err
	}
	if err := reuseport.SetIncomingCPU(l.tl, reuseport.CPUNone); err != nil {
		return err
	}
	if err := covered(); err != nil {
		return errors.Join(err, reuseport.SetIncomingCPU(l.tl, old))
	}
	l.leave()
	return nil
}

// covered returns nil when the members of the group on addr other than ours
// (inode ino) cover every online CPU. A member whose listed holders had all
// exited or let go of it by the time its CPU was read (a handoff's
// predecessor exiting) is unknown only for that moment: the group is read
// again, up to maxStepOutRereads times (counted in r.StepOutRereads), a
// little later each time, while ctx lasts. Members unreadable for any other
// reason (another user's) are not read again.
func (l *Listener) covered(ctx context.Context, addr string, online []int, ino uint64, r *Report) error {
	wait := stepOutRereadWait
	for i := 0; ; i++ {
		g, err := reuseport.Inspect(ctx, addr)
		if err != nil {
			return err
		}
		if testHookInspected != nil {
			testHookInspected()
		}
		g.ReadCPUs()
		err = g.CheckCovered(addr, online, ino)
		var ue *reuseport.UncoveredError
		if err == nil || !errors.As(err, &ue) || ue.NotHeld == 0 || i == maxStepOutRereads || !sleepCtx(ctx, wait) {
			return err
		}
		r.StepOutRereads++
		wait *= 2
	}
}

// The re-reads of a group whose members' holders let go of them while it
// was read: at most maxStepOutRereads, the first after stepOutRereadWait,
// each wait twice the last. An exiting process has closed its fds before
// it is reaped; the last close of a listener unhashes it at once.
const (
	maxStepOutRereads = 4
	stepOutRereadWait = time.Millisecond
)

// drainSteppedOut waits until every handshake that could be ours has ended,
// then accepts until the queue is empty and shuts the socket down
// (acceptUntilEmpty): no new connection can reach the queue by then.
func (l *Listener) drainSteppedOut(ctx context.Context, r *Report) error {
	port := uint16(l.tl.Addr().(*net.TCPAddr).Port)
	// A SYN handler that read our old SO_INCOMING_CPU runs in an RCU
	// read-side section that creates its request socket before it ends;
	// after a grace period every such request socket is visible.
	if err := rcuGrace(); err != nil {
		r.Errors = append(r.Errors, err.Error()+"; waited "+handshakePollMax.String()+" instead")
		sleepCtx(ctx, handshakePollMax)
	}
	hs, err := sockdiag.Handshakes(port)
	if err != nil {
		r.Errors = append(r.Errors, "handshakes: "+err.Error())
		return l.acceptUntilEmpty(ctx, r)
	}
	// inet_diag does not say which member a request socket belongs to: ours
	// are among those on the port now, and no later one is ours.
	pending := make(map[uint64]bool, len(hs))
	for _, h := range hs {
		pending[h.Cookie] = true
	}
	r.HandshakesAtStepOut = len(pending)
	if testHookHandshakes != nil {
		testHookHandshakes(len(pending))
	}
	wait := handshakePollMin
	for i := 0; len(pending) > 0 && i < maxHandshakePolls && sleepCtx(ctx, wait); i++ {
		wait = min(2*wait, handshakePollMax)
		now, err := sockdiag.Handshakes(port)
		if err != nil {
			r.Errors = append(r.Errors, "handshakes: "+err.Error())
			break
		}
		still := make(map[uint64]bool, len(pending))
		for _, h := range now {
			if pending[h.Cookie] {
				still[h.Cookie] = true
			}
		}
		pending = still
	}
	r.HandshakesLeft = len(pending)
	return l.acceptUntilEmpty(ctx, r)
}

// testHookInspected, if set by a test, runs each time a step-out has listed
// the group and its holders, before it reads the members' CPUs.
var testHookInspected func()

// testHookHandshakes, if set by a test, runs once a stepped-out stop has
// listed the handshakes it waits for, with how many.
var testHookHandshakes func(n int)

// membarrierCmdGlobal is MEMBARRIER_CMD_GLOBAL: it returns after an RCU grace
// period (synchronize_rcu) on a machine with more than one online CPU.
const membarrierCmdGlobal = 1

// rcuGrace waits for an RCU grace period. membarrier refuses the command on
// nohz_full kernels (EINVAL).
func rcuGrace() error {
	_, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0)
	if errno != 0 {
		return os.NewSyscallError("membarrier MEMBARRIER_CMD_GLOBAL", errno)
	}
	return nil
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
