package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// conn is a framed connection on a SOCK_STREAM unix socket. Every read and
// write has a deadline; fds travel with the first byte of a frame.
type conn struct {
	c       *net.UnixConn
	rc      syscall.RawConn
	timeout time.Duration
	ctx     context.Context // while bound: every read and write also ends with it
}

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
	var fds []int
	h := make([]byte, headerLen)
	if err := c.readFull(h, &fds, maxFDs, true); err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	n, err := frameLen(h)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	body := make([]byte, n)
	if err := c.readFull(body, &fds, maxFDs, false); err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	f, err := decodeBody(body)
	if err != nil {
		closeFDs(fds)
		return nil, nil, err
	}
	return f, fds, nil
}

// readFull fills p; fds arriving on the way are appended to *fds.
func (c *conn) readFull(p []byte, fds *[]int, maxFDs int, header bool) error {
	oob := make([]byte, unix.CmsgSpace(4*BatchFDs))
	for off := 0; off < len(p); {
		var n, oobn, flags int
		var serr error
		err := c.rc.Read(func(fd uintptr) bool {
			n, oobn, flags, _, serr = unix.Recvmsg(int(fd), p[off:], oob, unix.MSG_CMSG_CLOEXEC)
			return serr != unix.EAGAIN
		})
		if err == nil {
			err = serr
		}
		if oobn > 0 {
			got, perr := parseRights(oob[:oobn])
			*fds = append(*fds, got...)
			if perr != nil {
				return perr
			}
		}
		if err != nil {
			return wrapSyscall("recvmsg", err)
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return &FrameError{Err: ErrFDCount, Detail: "control message truncated: more fds than one batch"}
		}
		if len(*fds) > maxFDs {
			return &FrameError{Err: ErrFDCount, Detail: fmt.Sprintf("%d fds arrived, at most %d expected", len(*fds), maxFDs)}
		}
		if n == 0 {
			if off == 0 && header {
				return io.EOF
			}
			return &FrameError{Err: ErrTruncated, Detail: fmt.Sprintf("connection closed after %d of %d bytes", off, len(p))}
		}
		off += n
	}
	return nil
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
		unix.Close(fd)
	}
}
