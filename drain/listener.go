package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Steerer steers new connections away from a listener that starts draining,
// for example an SK_REUSEPORT eBPF program (package reuseport/steer). Stop
// calls MarkDraining first, before it reads the queue. An error is recorded in
// the Report and the drain goes on without steering.
type Steerer interface {
	MarkDraining(c syscall.Conn) error
}

// Options configures Wrap. The zero value means: no logging, no steering, and
// a 1 s bound on the accept-until-empty loop run by Close.
type Options struct {
	// Logger receives the Report once per stop; nil means no logging.
	// Nothing is logged on the accept path.
	Logger *zap.Logger
	// OnReport, if set, is called once per stop with the final report,
	// after it is logged (for example stats.Hub.DrainHook). It must not
	// block and must not change the report.
	OnReport func(*Report)
	// Steerer, if set, is told before the stop that this listener drains.
	Steerer Steerer
	// Shared says the socket is held by another process too (for example one
	// it was inherited from, or handed to, other than through package
	// handoff, which marks its sockets itself): the stop releases it (closes
	// our fd) and never shuts it down, which would stop it listening in the
	// other process as well.
	Shared bool
	// StepOut steps the listener out of its reuseport group's pick before
	// the stop, when the other members cover every online CPU with
	// SO_INCOMING_CPU (reuseport.ListenPerCPU, or Options.IncomingCPU per
	// worker): MethodStepOut, lossless with tcp_migrate_req 0 or 1 and no
	// privilege. Linux 6.1+. When it cannot, Report.StepOutRefused says why
	// and the stop uses the usual method. Not with a Steerer.
	StepOut bool
	// CloseTimeout bounds the stop run by Close, which has no context
	// (http.Server.Shutdown calls Close). Default 1 s.
	CloseTimeout time.Duration
}

// Listener is a TCP listener whose Close stops listening without losing the
// accept queue (see the package documentation for the three methods). Accept
// is the wrapped listener's Accept, untouched while serving.
//
// Under a bare http.Server, MethodAccept hands the drained connections to
// Serve after Shutdown has begun, and net/http drops their requests
// (golang/go#65802); Server runs the stop before Shutdown and serves them.
type Listener struct {
	tl   *net.TCPListener
	opts Options

	stopping atomic.Bool
	accepted atomic.Int64 // Accepts that succeeded while stopping

	once     sync.Once
	leaving  func() // set by the stop, before run (see leave)
	reapOnce sync.Once
	done     chan struct{} // closed when the stop has finished
	report   *Report
	err      error

	mu      sync.Mutex
	handoff []net.Conn    // accepted by the drain, waiting for Accept
	wake    chan struct{} // signalled when handoff grows
	taken   chan struct{} // closed once the stop is done and handoff is empty
	tookAll bool          // taken is closed
}

var (
	_ net.Listener = (*Listener)(nil)
	_ syscall.Conn = (*Listener)(nil)
)

// Wrap takes ownership of l, a *net.TCPListener or a *reuseport.Listener with
// an IPPROTO_TCP socket, and returns a Listener that drains it on Close. Other
// listeners, and MPTCP sockets (Go's default since 1.24; see
// net.ListenConfig.SetMultipathTCP), give an error wrapping ErrNotSupported;
// l is then left open and still owned by the caller. A nil l (also a typed
// nil) gives an error wrapping ErrNilListener.
func Wrap(l net.Listener, opts Options) (*Listener, error) {
	if nilListener(l) {
		return nil, neterr.Op("wrap", "tcp", nil, ErrNilListener)
	}
	var tl *net.TCPListener
	var sock *reuseport.Socket // what reuseport read of it
	switch v := l.(type) {
	case *net.TCPListener:
		tl = v
	case *reuseport.Listener:
		tl, sock = v.TCPListener, v.Socket()
	case *Listener:
		return nil, wrapError(l, fmt.Errorf("listener cannot be drained: already wrapped: %w", ErrNotSupported))
	default:
		return nil, wrapError(l, fmt.Errorf("listener cannot be drained: %T is not a *net.TCPListener: %w", l, ErrNotSupported))
	}
	if err := checkProtocol(tl, sock); err != nil {
		return nil, wrapError(l, err)
	}
	if opts.CloseTimeout <= 0 {
		opts.CloseTimeout = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Listener{tl: tl, opts: opts, done: make(chan struct{}), wake: make(chan struct{}, 1), taken: make(chan struct{})}, nil
}

// sharedByOption is Report.Shared for Options.Shared.
const sharedByOption = "Options.Shared"

func wrapError(l net.Listener, err error) error {
	return neterr.Op("wrap", l.Addr().Network(), l.Addr(), err)
}

// nilListener reports whether l is nil: untyped, or a nil pointer of a type
// Wrap takes (a *reuseport.Listener without its *net.TCPListener included).
func nilListener(l net.Listener) bool {
	switch v := l.(type) {
	case nil:
		return true
	case *net.TCPListener:
		return v == nil
	case *reuseport.Listener:
		return v == nil || v.TCPListener == nil
	case *Listener:
		return v == nil
	}
	return false
}

// checkProtocol refuses sockets that are not IPPROTO_TCP. s is what
// reuseport read of tl, or nil to read it now.
func checkProtocol(tl *net.TCPListener, s *reuseport.Socket) error {
	if s == nil {
		var err error
		if s, err = reuseport.ReadSocket(tl); err != nil {
			return err
		}
	}
	if s.Protocol != unix.IPPROTO_TCP {
		return fmt.Errorf("listener cannot be drained: socket protocol %d is not IPPROTO_TCP (MPTCP listeners are not drained): %w", s.Protocol, ErrNotSupported)
	}
	return nil
}

// Accept waits for the next connection. While serving it is the wrapped
// listener's Accept. Once the stop has begun it also returns the connections
// the drain accepted, then an error wrapping net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.tl.Accept()
	if err != nil {
		return l.acceptStopped(err)
	}
	if l.stopping.Load() {
		l.accepted.Add(1)
	}
	return c, nil
}

// acceptStopped is Accept's path after an error: during or after a stop it
// hands out the drained connections, then reports net.ErrClosed.
func (l *Listener) acceptStopped(err error) (net.Conn, error) {
	if !l.stopping.Load() {
		return nil, err
	}
	for {
		if c := l.pop(); c != nil {
			return c, nil
		}
		select {
		case <-l.done:
			if c := l.pop(); c != nil {
				return c, nil
			}
			return nil, neterr.Op("accept", "tcp", l.tl.Addr(), net.ErrClosed)
		case <-l.wake:
		}
	}
}

func (l *Listener) push(c net.Conn) {
	l.mu.Lock()
	l.handoff = append(l.handoff, c)
	l.mu.Unlock()
	l.signal()
}

func (l *Listener) pop() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.handoff) == 0 {
		return nil
	}
	c := l.handoff[0]
	l.handoff[0] = nil
	l.handoff = l.handoff[1:]
	l.checkTakenLocked()
	return c
}

// checkTakenLocked closes taken once the stop is done and nothing is pending.
func (l *Listener) checkTakenLocked() {
	if l.tookAll || len(l.handoff) > 0 {
		return
	}
	select {
	case <-l.done:
		l.tookAll = true
		close(l.taken)
	default:
	}
}

// closeUntaken closes the drained connections no Accept took (they would
// leak otherwise) and returns how many.
func (l *Listener) closeUntaken() int {
	l.mu.Lock()
	cs := l.handoff
	l.handoff = nil
	l.checkTakenLocked()
	l.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
	return len(cs)
}

func (l *Listener) pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.handoff)
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Close stops the listener without losing its queue, bounded by
// Options.CloseTimeout, and returns the stop's error (nil in the usual case).
// It is safe to call from any goroutine and more than once; later calls wait
// for the first and return the same result. It does not wait for Accept to
// take the drained connections (http.Server.Shutdown calls Close while holding
// a lock that its Serve loop needs); Stop does. Drained connections that no
// Accept takes within CloseTimeout after the stop are closed and logged.
func (l *Listener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.CloseTimeout)
	defer cancel()
	l.stop(ctx, nil)
	l.reapLater()
	return l.err
}

// Stop stops the listener like Close, then waits until Accept has taken every
// connection the drain accepted, or ctx ends (then it closes them). It returns the stop's Report
// (the same for every call) and the first error met.
func (l *Listener) Stop(ctx context.Context) (*Report, error) {
	return l.stopLeaving(ctx, nil)
}

// stopLeaving is Stop, calling leaving (see stop) if this call runs the stop.
func (l *Listener) stopLeaving(ctx context.Context, leaving func()) (*Report, error) {
	l.stop(ctx, leaving)
	select {
	case <-l.taken:
		return l.report, l.err
	case <-ctx.Done():
		n := l.closeUntaken()
		return l.report, l.opError(fmt.Errorf("%d drained connections not taken by Accept, closed: %w", n, ctx.Err()))
	}
}

// Report returns the stop's report, or nil before the stop has finished.
func (l *Listener) Report() *Report {
	select {
	case <-l.done:
		return l.report
	default:
		return nil
	}
}

// Done is closed when the stop has finished and the socket is closed.
func (l *Listener) Done() <-chan struct{} { return l.done }

// Addr returns the listener's address.
func (l *Listener) Addr() net.Addr { return l.tl.Addr() }

// SyscallConn returns the raw socket (it does not transfer ownership).
func (l *Listener) SyscallConn() (syscall.RawConn, error) { return l.tl.SyscallConn() }

// TCPListener returns the wrapped listener. Closing it directly bypasses the drain.
func (l *Listener) TCPListener() *net.TCPListener { return l.tl }

// isClosed reports whether err says the socket is already closed.
func isClosed(err error) bool { return errors.Is(err, net.ErrClosed) }
