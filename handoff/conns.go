package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Passing connected sockets (protocol version 2).
//
// A successor that registered a handler (HandleConns) says, in its ready
// frame, which listeners' connections it takes; the predecessor then keeps
// the conversation open after done, and PassConns sends connections on it
// in batches: a conns frame declaring each (the listener's name, family,
// local and peer address, state bytes) with its fds, acked by the successor
// once it has validated every fd of the batch and made a connection of it.
// Until the ack, the predecessor's own fds stay open: a batch that is not
// acked (the successor refused it, died, or hung) is still the caller's, and
// nothing of it reaches a handler. See "Passing connections" in doc.go.

// ConnSender passes connections to one receiver: a ready successor (kept
// by its Upgrader, see PassConns) or a sibling's ConnListener (DialConns).
type ConnSender struct {
	mu     sync.Mutex // serializes PassConns
	c      *conn
	takes  []string // the listeners whose connections the receiver takes
	passed int      // connections passed so far, under mu
	dead   atomic.Bool
	log    *zap.Logger
	opErr  func(error) error
}

// newConnSender passes connections on c to a receiver that takes those of
// the listeners takes; c is the sender's from now on. opErr wraps the
// errors of PassConns.
func newConnSender(c *conn, takes []string, log *zap.Logger, opErr func(error) error) *ConnSender {
	return &ConnSender{c: c, takes: takes, log: log, opErr: opErr}
}

// Takes reports whether the receiver takes the connections of the listener
// name; false once a PassConns failed or the sender is closed.
func (s *ConnSender) Takes(name string) bool {
	return !s.dead.Load() && slices.Contains(s.takes, name)
}

// Close ends the conversation: the receiver keeps every connection it
// acknowledged. Safe to call more than once.
func (s *ConnSender) Close() error {
	s.dead.Store(true)
	return s.c.Close()
}

// PassConns passes conns to the receiver, in batches of at most BatchFDs,
// and returns how many it took: conns[:passed] are the receiver's (their
// Conn is closed here), conns[passed:] are still the caller's, open and
// untouched. A connection the receiver did not acknowledge is never served
// by it. The error, if any, wraps ErrNotTaken (when the receiver takes no
// connections of a listener, nothing is passed), ErrValidation (it refused
// a batch) or why the conversation failed; after a failure the
// conversation is over and Takes is false. ctx bounds each batch's send
// and the wait for its ack, as the Timeout does: a batch whose ack did not
// come by then is settled exactly (see lastWord), the receiver's if its ack
// came first, else the caller's, and then the receiver cannot take it any
// more: no connection ends up held by both processes. Safe for concurrent
// use (calls are serialized).
func (s *ConnSender) PassConns(ctx context.Context, conns []PassedConn) (passed int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead.Load() {
		return 0, s.opErr(fmt.Errorf("pass conns: the conversation is over: %w", ErrNotTaken))
	}
	seen := make(map[*net.TCPConn]int, len(conns))
	for i, pc := range conns {
		j, twice := seen[pc.Conn]
		seen[pc.Conn] = i
		switch {
		case pc.Conn == nil:
			return 0, s.opErr(fmt.Errorf("pass conns: connection %d: nil Conn", i))
		case twice:
			return 0, s.opErr(fmt.Errorf("pass conns: connection %d: the same Conn as connection %d", i, j))
		case !slices.Contains(s.takes, pc.Listener):
			return 0, s.opErr(fmt.Errorf("pass conns: connection %d: the receiver takes no connections of listener %q: %w", i, pc.Listener, ErrNotTaken))
		case len(pc.State) > MaxConnState:
			return 0, s.opErr(fmt.Errorf("pass conns: connection %d: %d state bytes, limit %d", i, len(pc.State), MaxConnState))
		}
	}
	defer func() {
		if err != nil {
			s.Close()
			err = s.opErr(fmt.Errorf("pass conns: %d of %d passed: %w", passed, len(conns), err))
		}
	}()
	for passed < len(conns) {
		if err := ctx.Err(); err != nil {
			return passed, fmt.Errorf("%w: %w", ErrNotTaken, err)
		}
		n := batchLen(conns[passed:])
		if err := s.passBatch(ctx, conns[passed:passed+n]); err != nil {
			return passed, err
		}
		for _, pc := range conns[passed : passed+n] {
			pc.Conn.Close() // the receiver's now; this closes only our fd
		}
		passed += n
		s.passed += n
	}
	if len(conns) > 0 {
		s.log.Debug("connections passed", zap.String("event", "handoff.conns_passed"), zap.Int("count", len(conns)), zap.Int("total", s.passed))
	}
	return passed, nil
}

// batchLen is how many of conns go in the next batch: at most BatchFDs,
// with at most MaxFrame/2 state bytes (at least one).
func batchLen(conns []PassedConn) int {
	n, state := 0, 0
	for n < min(len(conns), BatchFDs) {
		state += len(conns[n].State)
		if n > 0 && state > MaxFrame/2 {
			break
		}
		n++
	}
	return n
}

// passBatch sends one batch and waits for its ack. The fds sent are dups,
// closed once sent.
func (s *ConnSender) passBatch(ctx context.Context, batch []PassedConn) error {
	c := s.c
	f := &frame{Type: typeConns, First: s.passed, Count: len(batch), Conns: make([]connDecl, len(batch))}
	fds := make([]int, 0, len(batch))
	defer func() { closeFDs(fds) }()
	for i, pc := range batch {
		fd, err := linux.DupConn(pc.Conn)
		if err != nil {
			return fmt.Errorf("%w: connection %s: %w", ErrNotTaken, pc.Conn.RemoteAddr(), err)
		}
		fds = append(fds, fd)
		if f.Conns[i], err = declareConn(fd, pc.Listener, pc.State); err != nil {
			return fmt.Errorf("%w: connection %s: %w", ErrNotTaken, pc.Conn.RemoteAddr(), err)
		}
	}
	// ctx bounds the send and the wait for the ack; the ack itself, once
	// bytes came, is read within the Timeout.
	unbind := c.bind(ctx)
	err := c.send(f, fds)
	if err != nil {
		unbind()
		return fmt.Errorf("%w: %w", ErrNotTaken, err)
	}
	if testHookConnsSent != nil {
		testHookConnsSent(f.First)
	}
	err = c.awaitData(c.timeout)
	unbind()
	var a *frame
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		a, err = c.lastWord(err)
	case err == nil:
		a, _, err = c.recv(0)
	}
	if err == nil {
		err = expect(a, typeAck)
	}
	if err == nil && a.Received != f.First+f.Count {
		err = &FrameError{Type: typeAck, Err: ErrProtocol, Detail: fmt.Sprintf("ack of %d, sent %d", a.Received, f.First+f.Count)}
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotTaken, err)
	}
	return nil
}

// lastWord settles a batch whose ack did not come in time: it shuts our
// side for reading, after which the receiver's ack cannot be sent any
// more (its write fails with EPIPE, and it closes the batch), then reads
// the ack that came before, if one did. Without it, an ack sent just as we
// gave up would leave the connections with both processes.
//
// The read waits for nothing and no deadline applies to it (takeQueued): a
// unix stream's sendmsg checks the receiving socket's RCV_SHUTDOWN and
// queues its data there under that socket's lock, the one shutdown takes
// to set it (net/unix/af_unix.c), so once shutdown returns our receive
// queue holds all of the ack there will ever be. (A deadline could only
// misjudge: with the old 10 ms one, a goroutine scheduled 10 ms late found
// its deadline passed before it read, took the queued ack for none, and
// kept connections the receiver had acked. The wait before, awaitData,
// reads nothing, so a deadline that ends it leaves every byte here.)
func (c *conn) lastWord(timeout error) (*frame, error) {
	if err := c.c.CloseRead(); err != nil {
		return nil, timeout
	}
	b, err := c.takeQueued(headerLen + maxAck)
	if err != nil || len(b) < headerLen {
		return nil, timeout
	}
	n, err := frameLen(b[:headerLen])
	if err != nil || len(b) < headerLen+n {
		return nil, timeout
	}
	a, err := decodeBody(b[headerLen : headerLen+n])
	if err != nil {
		return nil, timeout
	}
	return a, nil
}

// maxAck bounds what lastWord reads: an ack frame is far smaller.
const maxAck = 4 << 10

// takeQueued reads what c's receive queue holds, at most max bytes,
// without waiting and whatever the deadlines say (rc.Control, not rc.Read:
// Go fails a read whose deadline has passed before it tries).
func (c *conn) takeQueued(max int) ([]byte, error) {
	buf := make([]byte, max)
	off := 0
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		for off < len(buf) {
			n, _, _, _, err := unix.Recvmsg(int(fd), buf[off:], nil, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			if err != nil || n <= 0 {
				if err != unix.EAGAIN {
					serr = err
				}
				return
			}
			off += n
		}
	})
	if err == nil && serr != nil {
		err = os.NewSyscallError("recvmsg", serr)
	}
	return buf[:off], err
}

// awaitData waits, within d (and the bound ctx), until c has bytes to read
// or its peer hung up, and reads none: a deadline that passes here leaves
// every byte of the ack to lastWord.
func (c *conn) awaitData(d time.Duration) error {
	if err := c.deadline(c.c.SetReadDeadline, d); err != nil {
		return c.ctxErr(err)
	}
	var b [1]byte
	err := c.rc.Read(func(fd uintptr) bool {
		_, _, perr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return perr != unix.EAGAIN // the error, if any, is recv's to report
	})
	return c.ctxErr(wrapSyscall("recvmsg", err))
}

// testHookConnsSent is a test hook: it runs after each conns batch is sent.
var testHookConnsSent func(first int)
