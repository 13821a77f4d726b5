package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// maxDrainAccepts bounds the accept-until-empty loop in count; ctx bounds it
// in time.
const maxDrainAccepts = 1 << 16

// stop runs the stop once; concurrent callers wait for the first. The call
// that runs it calls leaving, if not nil, at most once: right before the
// socket stops taking new connections (see leave).
func (l *Listener) stop(ctx context.Context, leaving func()) {
	l.once.Do(func() {
		if leaving != nil {
			l.leaving = sync.OnceFunc(leaving)
		}
		l.stopping.Store(true)
		l.opts.Logger.Debug("drain begins", zap.String("event", "drain.begin"), zap.String("addr", l.tl.Addr().String()))
		r, err := l.run(ctx)
		l.report, l.err = r, err
		close(l.done)
		l.mu.Lock()
		l.checkTakenLocked()
		l.mu.Unlock()
		l.signal()
		r.log(l.opts.Logger)
		if f := l.opts.OnReport; f != nil {
			f(r)
		}
	})
}

// leave runs the stop's leaving func, if any, the first time it is called:
// each method calls it at the syscall after which no new connection reaches
// us, so that a client told then to leave reconnects to another socket, or
// finds none. Right before a shutdown (the clients of a lone listener, or of
// siblings, see it refuse from then on: one told an instant before has its
// connection migrated or accepted as before); right after the close of a
// socket that may live on in a successor (until our close, our Accept could
// still take a client we told); a step-out once the other members cover
// every CPU.
func (l *Listener) leave() {
	if l.leaving != nil {
		l.leaving()
		if testHookLeft != nil {
			testHookLeft()
		}
	}
}

// testHookLeft, if set by a test, runs once the stop's leaving func has.
var testHookLeft func()

// reapLater closes, after CloseTimeout, the drained connections no Accept has
// taken by then (Close cannot wait for Accept), once.
func (l *Listener) reapLater() {
	l.reapOnce.Do(func() {
		if l.pending() == 0 {
			return
		}
		time.AfterFunc(l.opts.CloseTimeout, func() {
			if n := l.closeUntaken(); n > 0 {
				l.opts.Logger.Warn("closed drained connections no Accept took", zap.String("addr", l.report.Addr), zap.Int("connections", n))
			}
		})
	})
}

// run chooses the method, applies it and closes the socket in every case.
func (l *Listener) run(ctx context.Context) (*Report, error) {
	r := &Report{Addr: l.tl.Addr().String(), Started: time.Now()}
	if s := l.opts.Steerer; s != nil {
		if err := s.MarkDraining(l.tl); err != nil {
			r.Errors = append(r.Errors, "mark draining: "+err.Error())
		} else {
			r.Steered = true
		}
	}
	q, err := reuseport.ReadQueue(l.tl)
	if err != nil {
		l.leave()
		l.tl.Close()
		r.Took = time.Since(r.Started)
		return r, l.opError(err)
	}
	r.QueuedAtStop = int(q.Len)
	id := l.identify(r)
	sc := l.look(ctx, r, id)
	drainStart := time.Now()
	r.Method, r.Why = choose(r, sc)
	if l.opts.StepOut && r.Method != MethodRelease {
		l.tryStepOut(ctx, r, id)
	}
	switch r.Method {
	case MethodRelease:
		if why := sc.careful(r); why != "" {
			l.opts.Logger.Warn("holder scan incomplete; releasing the socket instead of shutting it down", zap.String("event", "drain.unsure"),
				zap.String("addr", r.Addr), zap.String("why", why), zap.Ints("unreadable", r.Unreadable))
			// Nothing says another process serves on it: take what is
			// queued first, which loses nothing if one does, so that a
			// last holder's close finds the queue empty.
			err = l.acceptQueued(ctx, r)
		}
		err = errors.Join(err, l.release(r, id))
	case MethodMigrate:
		err = l.migrate(r)
	case MethodStepOut:
		err = l.drainSteppedOut(ctx, r)
	default:
		err = l.acceptUntilEmpty(ctx, r)
	}
	r.Accepted += int(l.accepted.Load())
	r.DrainTook = time.Since(drainStart)
	r.finish()
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return r, l.opError(err)
	}
	return r, nil
}

// choose picks the method. shutdown() (MethodMigrate, MethodAccept) stops the
// socket in every process that holds it, so it is chosen only when nothing
// says another process holds it and the holder scan proves none does. A
// socket received from a predecessor, or from systemd, is shared until a
// scan that read every process shows that no other process holds it: the
// predecessor (or a process it passed the socket to) may be any process,
// and so may the process that activated us (systemd's PID 1 keeps its
// sockets; an activator that executed us, as systemd-socket-activate does,
// keeps none, and a release would then reset the queue at our close), so
// one the scan cannot read, whatever its age or place in the tree, leaves
// it shared. A socket handed to a successor, or shared by Options.Shared,
// is shared for good.
func choose(r *Report, sc scan) (Method, string) {
	claimed := r.Shared == shared.Predecessor || r.Shared == shared.Systemd
	gone := claimed && sc.blind == "" && len(r.OtherHolders) == 0
	switch {
	case claimed && !gone && len(r.OtherHolders) == 0:
		return MethodRelease, "the socket is shared: " + r.Shared + " (accepted what was queued, then released: " + sc.blind + ")"
	case r.Shared != "" && !gone:
		return MethodRelease, "the socket is shared: " + r.Shared
	case len(r.OtherHolders) > 0:
		return MethodRelease, fmt.Sprintf("processes %v hold the same socket: it keeps listening", r.OtherHolders)
	case sc.unsure != "":
		return MethodRelease, "accepted what was queued, then released, not shut down, as another process may serve on it: " + sc.unsure
	}
	m, why := MethodAccept, acceptWhy(r)
	if r.Siblings > 0 && r.Migration {
		m, why = MethodMigrate, fmt.Sprintf("%d siblings and net.ipv4.tcp_migrate_req=1", r.Siblings)
	}
	if gone {
		why += "; no other process holds it (" + r.Shared + ", and the holder scan read every process)"
	}
	return m, why
}

// scan is what the holder scan could not prove, each "" when it could.
type scan struct {
	// unsure: that no process inherited our socket unseen (an unreadable
	// younger process of our parent's tree, a hidden /proc, a failure).
	unsure string
	// blind: that no process at all holds it unseen, as one we sent it to
	// (or that a predecessor did) may be any process: unsure, or any
	// process whose fds the scan could not read.
	blind string
}

// careful says why a release must accept what is queued first (it loses
// nothing if another process serves the socket, and leaves a last holder's
// close an empty queue), or "" when another process is known to serve it.
func (sc scan) careful(r *Report) string {
	switch {
	case len(r.OtherHolders) > 0:
		return ""
	case r.Shared == "":
		return sc.unsure
	case r.Shared == shared.Predecessor, r.Shared == shared.Systemd:
		return sc.blind
	}
	return ""
}

func acceptWhy(r *Report) string {
	switch {
	case r.Siblings == 0:
		return "no sibling in the reuseport group"
	default:
		return fmt.Sprintf("%d siblings but net.ipv4.tcp_migrate_req=0", r.Siblings)
	}
}

func (l *Listener) opError(err error) error { return neterr.Op("drain", "tcp", l.tl.Addr(), err) }

// identity is what identify reads of our socket; ino is 0 when fstat failed.
type identity struct {
	ino   uint64
	reuse bool
	err   error
}

// identify reads our socket's inode and SO_REUSEPORT, and fills r.Shared from
// Options.Shared or package shared's mark.
func (l *Listener) identify(r *Report) identity {
	var id identity
	id.err = linux.Control(l.tl, func(fd int) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return os.NewSyscallError("fstat", err)
		}
		id.ino = st.Ino
		reuse, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT)
		if err != nil {
			return os.NewSyscallError("getsockopt SO_REUSEPORT", err)
		}
		id.reuse = reuse != 0
		r.Shared, err = shared.Lookup(fd)
		return err
	})
	if l.opts.Shared {
		r.Shared = sharedByOption
	}
	if id.err != nil {
		r.Errors = append(r.Errors, id.err.Error())
	}
	return id
}

// look fills what the kernel shows: siblings, other holders of our socket,
// the migration sysctl and how many other listeners move the same counters.
// It returns what the holder scan could not prove (see scan).
func (l *Listener) look(ctx context.Context, r *Report, id identity) scan {
	unsure, unreadable := l.inspect(ctx, r, id)
	if unsure != "" {
		return scan{unsure: unsure, blind: unsure}
	}
	// A socket received from a predecessor can be held unseen by a process
	// that started no earlier than the predecessor (it, its successors,
	// their children); an older one could only if the predecessor sent it
	// there, which handoff never does (systemd's store is marked apart).
	var from uint64
	if r.Shared == shared.Predecessor {
		linux.Control(l.tl, func(fd int) error {
			from, _ = shared.Since(fd)
			return nil
		})
	}
	if unreadable = sockdiag.Since(unreadable, from); len(unreadable) > 0 {
		return scan{blind: fmt.Sprintf("the holder scan could not read the fds of %d processes started no earlier than the predecessor (%s)", len(unreadable), shortPIDs(unreadable))}
	}
	return scan{}
}

// inspect is look's scan. It returns why the holder scan cannot prove that
// no process inherited our socket unseen, or "" when it proves it: a
// failure, an unreadable process of our parent's tree younger than us, a
// /proc that hides processes, or a scan that does not see us hold it; and
// every process whose fds it could not read.
func (l *Listener) inspect(ctx context.Context, r *Report, id identity) (unsure string, unreadable []int) {
	t0 := time.Now()
	defer func() { r.InspectTook = time.Since(t0) }()
	if id.err != nil {
		return "cannot identify our socket: " + id.err.Error(), nil
	}
	if on, err := reuseport.MigrationEnabled(); err == nil {
		r.Migration = on
	} else {
		r.Errors = append(r.Errors, err.Error())
	}
	ap := l.tl.Addr().(*net.TCPAddr).AddrPort()
	g, err := reuseport.Inspect(ctx, netipString(ap))
	if err != nil {
		r.Errors = append(r.Errors, err.Error())
		return "the holder scan failed: " + err.Error(), nil
	}
	if all, err := sockdiag.Listeners(0); err == nil && len(all) > 1 {
		r.Estimated = true
		r.EstimateNote = fmt.Sprintf("%d other listeners in this network namespace move the same counters", len(all)-1)
	}
	// The scan numbers processes as /proc does, which is not os.Getpid() in
	// a PID namespace that kept its parent's /proc: taking ourselves for
	// another holder would release the socket instead of shutting it down.
	self, err := sockdiag.SelfPID()
	if err != nil {
		return "/proc does not show us: " + err.Error(), g.Unreadable
	}
	seen := false
	if id.reuse {
		r.Siblings = len(g.Members)
	}
	if m := g.Member(id.ino); m != nil {
		if id.reuse {
			r.Siblings--
		}
		for _, p := range m.Processes {
			if p.PID != self {
				r.OtherHolders = append(r.OtherHolders, p.PID)
			} else {
				seen = true
			}
		}
	}
	// Only a younger process of our parent's tree can have inherited our
	// socket; any other holder was sent it, which handoff and systemd mark
	// (Options.Shared otherwise).
	suspects, err := sockdiag.Suspects(g.Unreadable, self)
	if err != nil {
		return "cannot tell which unreadable processes could have inherited the socket: " + err.Error(), g.Unreadable
	}
	r.Unreadable = suspects
	hidden, err := sockdiag.Hidden()
	switch {
	case len(suspects) > 0:
		return fmt.Sprintf("the holder scan could not read the fds of %d processes of our parent's tree started after us (%s)", len(suspects), shortPIDs(suspects)), g.Unreadable
	case err != nil:
		return "cannot tell whether /proc shows every process: " + err.Error(), g.Unreadable
	case hidden != "":
		return hidden, g.Unreadable
	case !seen:
		return fmt.Sprintf("the holder scan does not see pid %d holding the socket", self), g.Unreadable
	}
	return "", g.Unreadable
}

func shortPIDs(pids []int) string {
	if len(pids) <= 8 {
		return fmt.Sprintf("pids %v", pids)
	}
	return fmt.Sprintf("pids %v and %d more", pids[:8], len(pids)-8)
}

// release closes our fd of a socket other processes hold, or may hold: the
// socket keeps listening, queue included, in them. It then looks whether it
// still listens. If it does not, no other process held it, and close()
// dropped its queue (migrated it, with siblings and the sysctl on): the
// report counts those connections as the remainder, not as left queued.
func (l *Listener) release(r *Report, id identity) error {
	ap := l.tl.Addr().(*net.TCPAddr).AddrPort()
	r.QueueAtClose = r.QueuedAtStop
	if q, err := reuseport.ReadQueue(l.tl); err == nil {
		r.QueueAtClose = int(q.Len)
	}
	before, cerr := reuseport.ReadCounters()
	err := closeListener(l.tl)
	l.leave() // after: the socket lives on in a successor, which takes the clients told now
	after, cerr2 := reuseport.ReadCounters()
	r.LeftQueued = r.QueueAtClose
	g, lerr := reuseport.InspectMembers(context.Background(), netipString(ap))
	if lerr != nil || id.ino == 0 {
		r.Errors = append(r.Errors, "after release, cannot tell whether the socket still listens: "+errors.Join(lerr, id.err).Error())
		return err
	}
	if g.Member(id.ino) != nil {
		r.StillListening = true
		return err
	}
	r.LeftQueued = 0
	r.Why += "; no other process held it: it stopped listening at our close"
	if cerr == nil && cerr2 == nil {
		d := after.Sub(before)
		r.Migrated, r.MigrateFailed, r.OutRsts = int(d.MigrateReqSuccess), int(d.MigrateReqFailure), int(d.OutRsts)
	}
	return err
}

// migrate shuts the socket down, which moves its queue to siblings inside the
// call, and reads the counters around it.
func (l *Listener) migrate(r *Report) error {
	before, cerr := reuseport.ReadCounters()
	l.leave()
	err := shutdown(l.tl)
	after, cerr2 := reuseport.ReadCounters()
	if cerr == nil && cerr2 == nil {
		d := after.Sub(before)
		r.Migrated, r.MigrateFailed, r.OutRsts = int(d.MigrateReqSuccess), int(d.MigrateReqFailure), int(d.OutRsts)
	} else {
		r.Errors = append(r.Errors, "counters: "+errors.Join(cerr, cerr2).Error())
	}
	return errors.Join(err, closeListener(l.tl))
}

// shutdown stops our socket listening with shutdown(SHUT_RDWR), never by
// close() alone: close() marks a listener shut down (sk_shutdown) before it
// stops listening, and a handshake completing on another CPU in between makes
// a child that inherits the mark; queued, then migrated, it sends its FIN as
// soon as it is established and reaches a sibling's Accept dead (its client
// reads EOF). shutdown() stops listening with the mark clear. Only for a
// socket no other process holds.
func shutdown(tl *net.TCPListener) error {
	err := linux.Control(tl, func(fd int) error {
		return os.NewSyscallError("shutdown", unix.Shutdown(fd, unix.SHUT_RDWR))
	})
	if isClosed(err) {
		return nil
	}
	return err
}

// acceptUntilEmpty accepts until the queue is empty, re-reading its depth
// right before the shutdown and close, and hands every connection to Accept.
func (l *Listener) acceptUntilEmpty(ctx context.Context, r *Report) error {
	before, cerr := reuseport.ReadCounters()
	err := l.acceptQueued(ctx, r)
	if q, qerr := reuseport.ReadQueue(l.tl); qerr == nil {
		r.QueueAtClose = int(q.Len)
	}
	l.leave()
	err = errors.Join(err, shutdown(l.tl), closeListener(l.tl))
	if after, cerr2 := reuseport.ReadCounters(); cerr == nil && cerr2 == nil {
		d := after.Sub(before)
		r.MigrateFailed, r.OutRsts = int(d.MigrateReqFailure), int(d.OutRsts)
	}
	return err
}

// acceptQueued accepts until the queue is empty (read again after the last
// EAGAIN), within maxDrainAccepts and ctx, and hands every connection to
// Accept.
func (l *Listener) acceptQueued(ctx context.Context, r *Report) error {
	var err error
	for i := 0; ; i++ {
		// Accepting what is queued costs no waiting, so an expired ctx
		// stops only a queue that keeps refilling.
		if i >= maxDrainAccepts || (i%256 == 255 && ctx.Err() != nil) {
			r.Errors = append(r.Errors, fmt.Sprintf("accept-until-empty stopped after %d accepts: %v", i, ctx.Err()))
			break
		}
		var c net.Conn
		c, err = l.acceptOne()
		if err == nil {
			l.push(c)
			r.Accepted++
			continue
		}
		if errors.Is(err, unix.ECONNABORTED) {
			continue
		}
		if !errors.Is(err, unix.EAGAIN) {
			break
		}
		q, qerr := reuseport.ReadQueue(l.tl)
		if qerr != nil {
			err = qerr
			break
		}
		if err = nil; q.Len == 0 {
			break
		}
		if ctx.Err() != nil { // it grew again, and time is up
			r.Errors = append(r.Errors, fmt.Sprintf("accept-until-empty stopped after %d accepts with %d queued: %v", i, q.Len, ctx.Err()))
			break
		}
	}
	return err
}

// acceptOne accepts one connection without waiting (EAGAIN when the queue is
// empty). The caller owns the connection.
func (l *Listener) acceptOne() (net.Conn, error) {
	nfd := -1
	err := linux.Control(l.tl, func(fd int) error {
		var err error
		nfd, _, err = unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			return os.NewSyscallError("accept4", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "drain")
	c, err := net.FileConn(f)
	f.Close()
	return c, err
}

// closeListener closes tl; an already closed listener is not an error.
func closeListener(tl *net.TCPListener) error {
	if err := tl.Close(); err != nil && !isClosed(err) {
		return err
	}
	return nil
}
