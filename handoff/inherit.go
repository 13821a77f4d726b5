package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/sockets"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// inherited is what New obtained for this process from its predecessor:
// the generation, the protocol version agreed, the sockets received and
// validated (until New gives them to the socket table), the conversation
// with the predecessor and its handoff socket (both until Ready), and why a
// handoff fell back. It is built once, by New's handshake, and does not
// change afterwards but for what release hands out, under its lock.
type inherited struct {
	gen     uint64 // ours: the predecessor's + 1, or 1
	version int    // agreed with the predecessor; 0 without one
	fback   error  // see FallbackReason
	socks   []*sockets.Socket

	mu   sync.Mutex
	pred *conn             // to the predecessor, until released
	hln  *net.UnixListener // the predecessor's handoff socket, until released
}

// release hands the conversation with the predecessor and its handoff
// socket to the caller (Ready or Close), once; later calls return nil.
func (in *inherited) release() (pred *conn, hln *net.UnixListener) {
	in.mu.Lock()
	defer in.mu.Unlock()
	pred, hln = in.pred, in.hln
	in.pred, in.hln = nil, nil
	return pred, hln
}

// Config.Path, filling in the inherited set.
type handshake struct {
	cfg *Config
	log *zap.Logger
	in  *inherited
	// noValues, noMax, noTickets: the predecessor is of a release that
	// refuses the hello's "options" key, its "max_version" key, or its
	// "tickets" key (see refusedKey).
	noValues, noMax, noTickets bool
	// tickets: the offer says a tickets frame follows the fd batches.
	tickets bool
}

// refusedKeyError says the predecessor is of a release that does not know
// a key of our hello: it answered "protocol" naming it, before anything
// else (no transfer began, and it counts no failure).
type refusedKeyError string

func (e refusedKeyError) Error() string {
	return fmt.Sprintf("predecessor refuses the hello's %q key", string(e))
}

// refusedKey returns which of the optional keys of our hello an older
// predecessor refused with f, or "".
func refusedKey(f *frame) string {
	if f.Type != typeError || f.Code != codeProtocol {
		return ""
	}
	for _, key := range []string{"max_version", "options", "tickets"} {
		if strings.Contains(f.Message, fmt.Sprintf("unknown key %q", key)) {
			return key
		}
	}
	return ""
}

// maxRedials bounds how often connect dials again after a hang-up.
const maxRedials = 5

// A predecessor that answers "busy" (ErrBusy: its conversations are all
// taken, say by a burst of observers) is dialled again after busyDelay,
// doubling up to busyMaxDelay, at most maxBusyRetries times and within the
// dial's deadline (Config.Timeout).
const (
	busyDelay      = 5 * time.Millisecond
	busyMaxDelay   = 200 * time.Millisecond
	maxBusyRetries = 200
)

// connect inherits from whoever serves Path. A predecessor that hangs up
// before the transfer completes (it died, or it was stopping because it had
// just handed over to another successor) is dialled again: if its handoff
// socket lives on in a successor, that one answers and we inherit from it.
// Only a path that refuses (no live holder) makes New start fresh (fresh is
// true); the last hang-up is kept as FallbackReason. A path that still
// answers after maxRedials+1 hang-ups is an error, never a second lineage.
// A predecessor that says "busy" is dialled again (see busyDelay) until
// the dial's deadline; the error then is the last "busy".
func (h *handshake) connect(ctx, dctx context.Context) (fresh bool, err error) {
	busy, delay := 0, busyDelay
	for i := 0; ; i++ {
		nc, ok, err := dial(dctx, h.cfg.Path)
		if err != nil || !ok {
			return err == nil, err
		}
		err = h.inherit(ctx, nc)
		if errors.Is(err, ErrBusy) && busy < maxBusyRetries {
			busy++
			h.log.Warn("predecessor busy; dialling the handoff socket again", zap.String("event", "handoff.busy_retry"),
				zap.Int("attempt", busy), zap.Duration("after", delay), zap.Error(err))
			t := time.NewTimer(delay)
			select {
			case <-t.C:
				delay = min(2*delay, busyMaxDelay)
				i--
				continue
			case <-dctx.Done():
				t.Stop()
				return false, fmt.Errorf("%w; told busy %d times, until: %w", err, busy, dctx.Err())
			}
		}
		var rk refusedKeyError
		if errors.As(err, &rk) {
			// An older predecessor: say hello as its release does (once
			// per key; it does not count as a redial).
			switch rk {
			case "options":
				h.noValues = true
			case "tickets":
				h.noTickets = true
			default:
				h.noMax = true
			}
			i--
			continue
		}
		if err == nil {
			h.in.fback = nil // we inherited after all
		}
		if err == nil || !predecessorGone(err) {
			return false, err
		}
		h.in.fback = err
		if len(h.in.socks) > 0 {
			// It died mid-transfer: nobody else has these sockets, nor
			// its handoff socket. Keep what was received; the rest fresh.
			return true, nil
		}
		if i == maxRedials {
			return false, fmt.Errorf("hung up %d times, and the handoff socket still answers: %w", i+1, err)
		}
		h.log.Warn("predecessor hung up; dialling the handoff socket again", zap.String("event", "handoff.redial"), zap.Int("attempt", i+1), zap.Error(err))
	}
}

// testHookHello, if set by a test, runs in a successor right before it sends
// its hello.
var testHookHello atomic.Pointer[func()]

// inherit runs the successor's side of the protocol up to the last ack. On
// success the connection stays open for Ready; on failure it is closed, and
// so is every fd received.
func (h *handshake) inherit(ctx context.Context, nc *net.UnixConn) (err error) {
	start := time.Now()
	c, err := newConn(nc, h.cfg.Timeout)
	if err != nil {
		nc.Close()
		return err
	}
	defer c.bind(ctx)()
	defer func() {
		if err != nil {
			if !predecessorGone(err) && !errors.As(err, new(*RemoteError)) && !errors.As(err, new(refusedKeyError)) {
				c.send(&frame{Type: typeError, Code: code(err), Message: err.Error()}, nil)
			}
			c.Close()
		}
	}()
	// The predecessor's credentials are those of each frame it writes
	// (conn.talkers); SO_PEERCRED names the process that bound the
	// handoff socket, generation 1 once it was passed on.
	c.talkers = func(cred *unix.Ucred) error { return checkPeer(cred, h.cfg.AllowUIDs) }
	bound, err := c.peerCred()
	if err != nil {
		return err
	}
	if hook := testHookHello.Load(); hook != nil {
		(*hook)()
	}
	hello := helloFrame(roleSuccessor, 0, !h.noValues, !h.noMax)
	hello.Tickets = h.cfg.TicketKeys != nil && !h.noTickets
	if err := c.send(hello, nil); err != nil {
		return c.answeredFirst(err)
	}
	f, _, err := c.recv(0)
	// conn.ctxErr has already wrapped ctx's error in a timeout that ctx's
	// deadline caused (its timer may not have fired yet): that one is ours.
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
		err = &FrameError{Type: typeHello, Err: ErrNoAnswer, Detail: fmt.Sprintf("the handoff socket (bound by pid %d) accepted no conversation within %v", bound.Pid, h.cfg.Timeout)}
		h.log.Warn("predecessor does not answer; not starting a second lineage beside it", zap.String("event", "handoff.no_answer"), zap.Int32("bound_by_pid", bound.Pid), zap.Duration("timeout", h.cfg.Timeout))
	}
	if err != nil {
		return err
	}
	switch key := refusedKey(f); {
	case key == "options" && !h.noValues, key == "max_version" && !h.noMax, key == "tickets" && !h.noTickets && hello.Tickets:
		return refusedKeyError(key)
	}
	if err := expect(f, typeHello); err != nil {
		return err
	}
	if want := max(baseVersion, Version*boolInt(!h.noMax)); f.Version < baseVersion || f.Version > want {
		return &FrameError{Type: typeHello, Err: ErrVersion, Detail: fmt.Sprintf("predecessor speaks version %d, we speak %d to %d", f.Version, baseVersion, want)}
	}
	h.in.version = f.Version
	h.in.gen = f.Generation + 1
	cred := c.talker // set: the hello was read
	h.log.Info("connected to predecessor", zap.String("event", "handoff.connected"), zap.Int32("peer_pid", cred.Pid), zap.Uint32("peer_uid", cred.Uid), zap.Uint64("generation", h.in.gen))
	pid := f.PID // in its PID namespace; the kernel's is in ours, 0 if it has none there
	if cred.Pid > 0 {
		pid = int(cred.Pid)
	}
	socks, err := h.receive(c, senderStart(pid))
	h.in.socks = socks // also when the predecessor died mid-transfer: they are live sockets
	if err != nil {
		return err
	}
	if h.tickets {
		err = h.receiveTickets(c)
	}
	if err == nil && f.Handoff {
		h.in.hln, err = h.receiveSelf(c)
	}
	if err != nil {
		if !predecessorGone(err) { // else they are live: keep them, as receive does
			for _, s := range socks {
				s.Close()
			}
			h.in.socks = nil
		}
		return err
	}
	h.in.pred = c
	h.log.Info("received sockets", zap.String("event", "handoff.received"), zap.Int("count", len(socks)), zap.Duration("took", time.Since(start)))
	return nil
}

// receive reads the offer and the fd batches, acks each batch as it
// arrives, and validates each fd (building the caller's listener for it) on up
// to GOMAXPROCS goroutines while later batches are still coming: each fd costs
// some 40 syscalls, which dominate a large handoff. It returns the first error
// in offer order; on error every fd received is closed, except when the
// predecessor died during the transfer: then the sockets received and
// validated so far are returned with the error. They are live kernel sockets
// (the predecessor's clients queue on them), so closing them would refuse
// receive reads the offer and its fd batches, and validates each socket as
// it arrives (on GOMAXPROCS workers, beside the reads): the socket table's
// Socket of each, marked as received from a predecessor that started at
// start, its listener prepared. If the predecessor dies mid-transfer, the
// sockets received and valid so far are returned with the error: they are
// live sockets nobody else holds.
func (h *handshake) receive(c *conn, start uint64) (_ []*sockets.Socket, err error) {
	f, _, err := c.recv(0)
	if err != nil {
		return nil, err
	}
	if err := expect(f, typeOffer); err != nil {
		return nil, err
	}
	offer, sets := f.Sockets, f.OptionSets
	if f.Tickets && (h.cfg.TicketKeys == nil || h.noTickets) {
		return nil, &FrameError{Type: typeOffer, Err: ErrProtocol, Detail: "offers ticket keys, which we did not ask for"}
	}
	h.tickets = f.Tickets
	fds := make([]int, len(offer))
	socks := make([]*sockets.Socket, len(offer))
	errs := make([]error, len(offer))
	var failed atomic.Bool
	queue := make(chan int, len(offer))
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(offer)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range queue {
				d := &offer[i]
				so, err := validate(fds[i], d, sets)
				if err == nil {
					s := sockets.NewInherited(d.Name, sockets.Kind(d.Kind), d.Network, d.Address, fds[i], so, start)
					// Listen compares the socket with what our Config
					// would create: Prepare checks now, off the caller's
					// path. A mismatch is Listen's to report.
					if err = s.Prepare(&h.cfg.Listen); err == nil {
						socks[i] = s
					}
				}
				if err != nil {
					errs[i] = err
					failed.Store(true)
				}
			}
		}()
	}
	n := 0 // sockets received
	closeFrom := func(from int) {
		for i := from; i < n; i++ {
			if socks[i] != nil {
				socks[i].Close()
			} else {
				closeFDs(fds[i : i+1])
			}
		}
	}
	err = receiveBatches(c, offer, func(got []int) {
		for _, fd := range got {
			fds[n] = fd
			queue <- n
			n++
		}
	}, failed.Load)
	close(queue)
	wg.Wait()
	if err != nil && predecessorGone(err) {
		var kept []*sockets.Socket
		for i := range n {
			if errs[i] == nil {
				kept = append(kept, socks[i])
			} else if socks[i] == nil {
				closeFDs(fds[i : i+1])
			}
		}
		return kept, err
	}
	if err == nil {
		for _, e := range errs[:n] {
			if e != nil {
				err = e
				break
			}
		}
	}
	if err != nil {
		closeFrom(0)
		return nil, err
	}
	for _, s := range socks {
		h.log.Debug("validated", zap.String("event", "handoff.validated"), zap.String("name", s.Name()), zap.String("kind", string(s.Kind())), zap.String("address", s.Address()))
	}
	return socks, nil
}

// receiveBatches reads the fd batches of offer, passes each batch's fds to
// take and acks it, until all are received or stop says a validation failed
// (then it returns nil: the caller reports that failure). The fds of a batch
// that is not taken are closed.
func receiveBatches(c *conn, offer []socketInfo, take func([]int), stop func() bool) error {
	for n := 0; n < len(offer) && !stop(); {
		b, got, err := c.recv(BatchFDs)
		if err == nil {
			err = expect(b, typeFDs)
		}
		want := min(BatchFDs, len(offer)-n)
		if err == nil && (b.First != n || b.Count != want || len(got) != want) {
			err = &FrameError{Type: typeFDs, Err: ErrFDCount,
				Detail: fmt.Sprintf("batch first=%d count=%d with %d fds, expected first=%d count=%d of %d offered", b.First, b.Count, len(got), n, want, len(offer))}
		}
		if err != nil {
			closeFDs(got)
			return err
		}
		take(got)
		n += len(got)
		if err := c.send(&frame{Type: typeAck, Received: n}, nil); err != nil {
			return err
		}
	}
	return nil
}

// receiveSelf reads the predecessor's handoff listening socket, checks it
// (a listening unix stream socket bound to our Path, or for a file path to a
// name in its directory) and returns it as the listener Ready will serve; it
// never unlinks the file.
func (h *handshake) receiveSelf(c *conn) (*net.UnixListener, error) {
	f, fds, err := c.recv(1)
	if err == nil {
		err = expect(f, typeHandoff)
	}
	if err == nil && len(fds) != 1 {
		err = &FrameError{Type: typeHandoff, Err: ErrFDCount, Detail: fmt.Sprintf("%d fds, want 1", len(fds))}
	}
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	defer closeFDs(fds)
	info := &f.Sockets[0]
	if err := checkHandoffName(h.cfg.Path, info); err != nil {
		return nil, err
	}
	if _, err := validate(fds[0], info, nil); err != nil {
		return nil, err
	}
	return unixListener(fds[0])
}

// unixListener returns a listener on a dup of fd, a listening unix stream
// socket, that never unlinks its path.
func unixListener(fd int) (*net.UnixListener, error) {
	dup, err := linux.DupCloexec(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "handoff")
	defer f.Close()
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("%T for the handoff socket", ln)
	}
	ul.SetUnlinkOnClose(false)
	return ul, nil
}

// receiveTickets reads the tickets frame and imports its keys (a sealed
// memfd, checked by ticket.Keys.Import) into Config.TicketKeys. The memfd is
// closed here; its content is never logged.
func (h *handshake) receiveTickets(c *conn) error {
	f, fds, err := c.recv(1)
	if err == nil {
		err = expect(f, typeTickets)
	}
	if err == nil && len(fds) != 1 {
		err = &FrameError{Type: typeTickets, Err: ErrFDCount, Detail: fmt.Sprintf("%d fds, want 1", len(fds))}
	}
	if err != nil {
		closeFDs(fds)
		return err
	}
	mf := os.NewFile(uintptr(fds[0]), "tickets")
	defer mf.Close()
	if err := h.cfg.TicketKeys.Import(mf); err != nil {
		return &FrameError{Type: typeTickets, Err: ErrValidation, Detail: err.Error()}
	}
	h.log.Info("received session-ticket keys", zap.String("event", "handoff.tickets"), zap.Int("keys", h.cfg.TicketKeys.Len()))
	return nil
}

// senderStart is when the predecessor started, as /proc says, for drain's
// holder scan (see shared.MarkReceived): pid is the one the kernel gave with
// its hello (SCM_CREDENTIALS), or, when it has none in our PID namespace, the
// one its hello says (SO_PEERCRED names the process that bound the handoff
// socket, an older generation when the socket was passed on). It is used only when /proc
// numbers our PID namespace and that process started no later than us, as a
// predecessor did; otherwise the bound is just after /proc's PID 1 started:
// every process but that init counts, and the init can hold our socket only
// if it was sent there, which handoff never does (systemd's fd store is
// marked apart). 0 (every process) when /proc cannot say.
func senderStart(pid int) uint64 {
	if self, err := sockdiag.SelfPID(); err == nil && self == os.Getpid() {
		start, err := sockdiag.StartTime(pid)
		mine, err2 := sockdiag.StartTime(self)
		if err == nil && err2 == nil && start <= mine {
			return start
		}
	}
	if start, err := sockdiag.StartTime(1); err == nil {
		return start + 1
	}
	return 0
}
