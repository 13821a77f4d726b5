package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// conn is a framed connection on a SOCK_STREAM unix socket. Every read and
// write has a deadline; fds travel with the first byte of a frame.
type conn struct {
	c       *net.UnixConn
	rc      syscall.RawConn
	timeout time.Duration
	ctx     context.Context // while bound: every read and write also ends with it
	// pool, if set, bounds what this conn's frames may buffer beyond
	// frameQuota (the handoff server's conversations share one).
	pool *pool
	// waitingSince is since when the conversation has waited for bytes
	// (unix ns): set by the handoff server when it admits it (to when it
	// accepted it), and by a read
	// that finds none (unless set); 0 from when a read gets bytes until it
	// next finds none, and once a read ended (its goroutine holds what it
	// read).
	waitingSince atomic.Int64
	state        atomic.Int32 // the server's: fresh, greeted or evicted
	// version is the protocol version agreed in this conversation's hellos.
	version int
	// kept: the conversation outlives its handler (a successor that takes
	// connections, see serverConfig.onReady).
	kept atomic.Bool
	// talkers, when set, checks the credentials of whoever wrote each byte
	// read (SCM_CREDENTIALS: the socket has SO_PASSCRED, see dial); a read
	// without them, or that it refuses, fails. SO_PEERCRED cannot do this
	// for a dialling side: it names the process that called listen(),
	// which for a handoff socket passed from generation to generation is
	// generation 1, not the predecessor that talks.
	talkers func(*unix.Ucred) error
	// talker is the credentials of the first bytes read with talkers set.
	talker *unix.Ucred
}

// Conversation states (conn.state), as the handoff server sees them.
const (
	fresh   = iota // no hello yet
	greeted        // said hello
	evicted        // gave way to a newcomer before its hello
)

// Bounds of what frames being read may buffer: a frame's buffer starts at
// 512 bytes and doubles as its bytes arrive, up to its announced length. Of
// that, frameQuota bytes are each conversation's own; the rest is taken
// from a pool shared by the handoff server's conversations.
const (
	frameQuota = 4 << 10
	poolBytes  = 2 * MaxFrame
)

// pool counts the bytes that frames being read hold beyond frameQuota; a
// nil pool has no limit.
type pool struct {
	mu   sync.Mutex
	used int
}

// take reserves n bytes, or reports that the pool has not that many left.
func (p *pool) take(n int) bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used+n > poolBytes {
		return false
	}
	p.used += n
	return true
}

// put returns n bytes to the pool.
func (p *pool) put(n int) {
	if p != nil && n > 0 {
		p.mu.Lock()
		p.used -= n
		p.mu.Unlock()
	}
}

// Backoff of the accept loop after a failed accept, as net/http's Serve: the
// first retry after 5 ms, each next one after twice the delay, at most 1 s.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

func newConn(c *net.UnixConn, timeout time.Duration) (*conn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &conn{c: c, rc: rc, timeout: timeout}, nil
}

func (c *conn) Close() error { return c.c.Close() }

// hangUp ends the conversation: it shuts our side down, then waits, at most
// d, for the peer to close its side, so that what the peer frees when it sees
// us go (a predecessor's handoff slot) is free when hangUp returns; then it
// closes c.
func (c *conn) hangUp(d time.Duration) {
	defer c.Close()
	if c.c.CloseWrite() != nil || c.c.SetReadDeadline(time.Now().Add(d)) != nil {
		return
	}
	buf := make([]byte, 512)
	for range 1024 { // a peer that keeps talking gets 512 KiB read, then the close
		if _, err := c.c.Read(buf); err != nil {
			return
		}
	}
}

// bind makes every read and write of c also end when ctx ends (its deadline
// applies when sooner than the timeout; a cancel interrupts a blocked call),
// until unbind is called. The error of an interrupted call wraps ctx.Err().
func (c *conn) bind(ctx context.Context) (unbind func()) {
	c.ctx = ctx
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Unix(1, 0)) })
	return func() { stop(); c.ctx = nil }
}

// deadline sets, with set, the deadline of the next read or write: d from
// now, or the bound ctx's deadline when sooner. It fails with ctx's error if
// ctx has ended: checked after the deadline is set, so that a ctx ending in
// between is caught here or by bind's AfterFunc.
func (c *conn) deadline(set func(time.Time) error, d time.Duration) error {
	t := time.Now().Add(d)
	if c.ctx != nil {
		if dl, ok := c.ctx.Deadline(); ok && dl.Before(t) {
			t = dl
		}
	}
	if err := set(t); err != nil {
		return err
	}
	if c.ctx != nil && c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	return nil
}

// ctxErr is err, or, when the bound ctx has ended, err wrapped with ctx's
// error (the deadline that cut the call short was ctx's).
func (c *conn) ctxErr(err error) error {
	if err == nil || c.ctx == nil {
		return err
	}
	cerr := c.ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// The deadline set from ctx's can fire before ctx's own timer.
		if dl, ok := c.ctx.Deadline(); ok && !time.Now().Before(dl) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}

// peerCred reads SO_PEERCRED.
func (c *conn) peerCred() (*unix.Ucred, error) {
	var cred *unix.Ucred
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return nil, os.NewSyscallError("getsockopt SO_PEERCRED", err)
	}
	return cred, nil
}

// queued is how many bytes wait in c's receive queue (SIOCINQ).
func (c *conn) queued() (int, error) { return linux.Unread(c.c) }

// send writes one frame, with fds attached when given.
func (c *conn) send(f *frame, fds []int) error {
	b, err := encodeFrame(f)
	if err != nil {
		return err
	}
	if err := c.deadline(c.c.SetWriteDeadline, c.timeout); err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for len(b) > 0 {
		var n int
		var serr error
		err := c.rc.Write(func(fd uintptr) bool {
			n, serr = unix.SendmsgN(int(fd), b, oob, nil, unix.MSG_NOSIGNAL)
			return serr != unix.EAGAIN
		})
		if err == nil {
			err = serr
		}
		if err != nil {
			return c.ctxErr(fmt.Errorf("send %s: %w", f.Type, wrapSyscall("sendmsg", err)))
		}
		b, oob = b[n:], nil
	}
	return nil
}

// answeredFirst is err, a failure to send our hello, unless the peer
// answered before it hung up: a server whose conversations are all taken
// says "busy" to a newcomer before reading its hello, and closes; the send
// then fails (EPIPE) with the answer waiting in our receive queue. That
// answer, an error frame, is then the error (a *RemoteError: a successor
// dials again on "busy"); so is a failure to read it that is not a hang-up,
// such as our refusal of its writer's uid (c.talkers): a peer that both
// sides refuse must not look like one that hung up. A hang-up without answer
// reads EOF at once.
func (c *conn) answeredFirst(err error) error {
	if !predecessorGone(err) {
		return err
	}
	switch f, _, rerr := c.recv(0); {
	case rerr == nil && f.Type == typeError:
		return expect(f, typeHello)
	case rerr != nil && !predecessorGone(rerr):
		return rerr
	}
	return err
}

// recv reads one frame and the fds that came with it (at most maxFDs; more,
// or a truncated control message, is an error and every fd is closed). The
// fds are received with MSG_CMSG_CLOEXEC; the caller owns them.
func (c *conn) recv(maxFDs int) (*frame, []int, error) {
	return c.recvWithin(maxFDs, c.timeout)
}

// recvWithin is recv with another deadline.
func (c *conn) recvWithin(maxFDs int, d time.Duration) (*frame, []int, error) {
	f, fds, err := c.recvFrame(maxFDs, d)
	return f, fds, c.ctxErr(err)
}

func (c *conn) recvFrame(maxFDs int, d time.Duration) (*frame, []int, error) {
	if err := c.deadline(c.c.SetReadDeadline, d); err != nil {
		return nil, nil, err
	}
	// A conversation the server evicted before this read set its deadline
	// would otherwise wait the whole timeout (the server's past deadline was
	// overwritten); one evicted after finds its read cut short.
	if c.state.Load() == evicted {
		return nil, nil, &FrameError{Err: ErrBusy, Detail: "gave way to a newcomer before its hello"}
	}
	var fds []int
	h := make([]byte, headerLen)
	if _, err := c.readFull(h, &fds, maxFDs, true); err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	n, err := frameLen(h)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	body, held, err := c.readBody(n, &fds, maxFDs)
	var f *frame
	if err == nil {
		f, err = decodeBody(body)
	}
	c.pool.put(held)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	return f, fds, nil
}

// readBody reads a payload of n bytes into a buffer that grows as the bytes
// arrive, so that a header announcing 1 MiB costs nothing until the bytes
// come. held is what the buffer took from c.pool (the caller puts it back);
// a pool without room is ErrBusy.
func (c *conn) readBody(n int, fds *[]int, maxFDs int) (body []byte, held int, err error) {
	body = make([]byte, 0, min(n, 512))
	for len(body) < n {
		if len(body) == cap(body) {
			size := min(2*cap(body), n)
			if more := max(size-frameQuota, 0) - held; more > 0 {
				if !c.pool.take(more) {
					return nil, held, &FrameError{Err: ErrBusy, Detail: fmt.Sprintf("frames being read already hold %d bytes beyond their own %d", poolBytes, frameQuota)}
				}
				held += more
			}
			body = slices.Grow(body, size-len(body))[:len(body)]
		}
		off := len(body)
		body = body[:min(cap(body), n)]
		if got, err := c.readFull(body[off:], fds, maxFDs, false); err != nil {
			if errors.Is(err, ErrTruncated) {
				err = &FrameError{Err: ErrTruncated, Detail: fmt.Sprintf("connection closed after %d of %d bytes", off+got, n)}
			}
			return nil, held, err
		}
	}
	return body, held, nil
}

// readFull fills p; fds arriving on the way are appended to *fds. It
// returns how many bytes it read.
func (c *conn) readFull(p []byte, fds *[]int, maxFDs int, header bool) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4*BatchFDs)+unix.CmsgSpace(unix.SizeofUcred))
	defer c.waitingSince.Store(0)
	for off := 0; off < len(p); {
		var n, oobn, flags int
		var serr error
		err := c.rc.Read(func(fd uintptr) bool {
			n, oobn, flags, _, serr = unix.Recvmsg(int(fd), p[off:], oob, unix.MSG_CMSG_CLOEXEC)
			if serr != unix.EAGAIN {
				c.waitingSince.Store(0)
				return true
			}
			c.waitingSince.CompareAndSwap(0, time.Now().UnixNano())
			return false
		})
		if err == nil {
			err = serr
		}
		if oobn > 0 {
			got, perr := parseRights(oob[:oobn])
			*fds = append(*fds, got...)
			if perr != nil {
				return off, perr
			}
		}
		if err != nil {
			return off, wrapSyscall("recvmsg", err)
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return off, &FrameError{Err: ErrFDCount, Detail: "control message truncated: more fds than one batch"}
		}
		if len(*fds) > maxFDs {
			return off, &FrameError{Err: ErrFDCount, Detail: fmt.Sprintf("%d fds arrived, at most %d expected", len(*fds), maxFDs)}
		}
		if n > 0 && c.talkers != nil {
			if err := c.checkTalker(oob[:oobn]); err != nil {
				return off, err
			}
		}
		if n == 0 {
			if off == 0 && header {
				return off, io.EOF
			}
			return off, &FrameError{Err: ErrTruncated, Detail: fmt.Sprintf("connection closed after %d of %d bytes", off, len(p))}
		}
		off += n
	}
	return len(p), nil
}

// checkTalker checks, with c.talkers, the writer's credentials that came
// with bytes read (the SCM_CREDENTIALS message in oob), and keeps the first
// in c.talker.
func (c *conn) checkTalker(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return os.NewSyscallError("parse control message", err)
	}
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_CREDENTIALS {
			continue
		}
		cred, err := unix.ParseUnixCredentials(&msgs[i])
		if err != nil {
			return os.NewSyscallError("parse SCM_CREDENTIALS", err)
		}
		if c.talker == nil {
			c.talker = cred
		}
		return c.talkers(cred)
	}
	return fmt.Errorf("%w: bytes came without their writer's credentials (SO_PASSCRED)", ErrPeerRefused)
}

// parseRights extracts the fds of every SCM_RIGHTS message.
func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, os.NewSyscallError("parse control message", err)
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		fds = append(fds, got...)
		if err != nil {
			return fds, os.NewSyscallError("parse SCM_RIGHTS", err)
		}
	}
	return fds, nil
}

func wrapSyscall(op string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return os.NewSyscallError(op, err)
	}
	return err
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// The errors of a peer that died or hung up (see predecessorGone).
var (
	errEOF   = io.EOF
	errReset = syscall.ECONNRESET
	errPipe  = syscall.EPIPE
)

// predecessorGone reports errors that mean the predecessor died or hung up.
func predecessorGone(err error) bool {
	var re *RemoteError
	return !errors.As(err, &re) && (errors.Is(err, ErrTruncated) || errors.Is(err, errEOF) ||
		errors.Is(err, errReset) || errors.Is(err, errPipe))
}
