package quicdrain

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Message types on the forwarding sockets.
const (
	msgData     = 1 // addrLen(1) addr port(2) datagram: a client's datagram
	msgHandover = 2 // see encodeHandover
)

// fwdSocket is a generation's unix datagram socket: it receives the
// datagrams newer generations forward, and sends (without blocking) those
// it forwards to older ones.
type fwdSocket struct {
	c    *net.UnixConn
	raw  syscall.RawConn
	path string
}

func listenFwd(path string) (*fwdSocket, error) {
	os.Remove(path) // a stale file of a dead generation of the same number
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		c.Close()
		return nil, err
	}
	raw, err := c.SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	return &fwdSocket{c: c, raw: raw, path: path}, nil
}

// close removes the socket's file, then closes it.
func (f *fwdSocket) close() error {
	os.Remove(f.path)
	return f.c.Close()
}

// encodeData builds the msgData message of datagram b from src into buf.
func encodeData(buf []byte, src netip.AddrPort, b []byte) []byte {
	m := buf[:0]
	ip := src.Addr().Unmap()
	m = append(m, msgData, byte(ip.BitLen()/8))
	m = append(m, ip.AsSlice()...)
	m = append(m, byte(src.Port()>>8), byte(src.Port()))
	return append(m, b...)
}

// dest is the way to one older generation: a unix datagram socket
// connected to its forwarding socket, and a bounded queue that one
// goroutine writes from. A connected socket's write waits while the
// receiver's queue is full (net.unix.max_dgram_qlen, only 10 by default),
// so the queue here is what absorbs a burst; when it is full the datagram
// is dropped (counted). The goroutine ends when the generation is gone
// (its socket refuses) or close is called.
type dest struct {
	gen  uint64
	c    *net.UnixConn
	q    chan []byte
	gone atomic.Bool
	lost *atomic.Int64 // the generation's dropGone: queued, never written
	done chan struct{}
}

func dialDest(path string, gen uint64, queue int, lost *atomic.Int64) (*dest, error) {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, err
	}
	d := &dest{gen: gen, c: c, q: make(chan []byte, queue), lost: lost, done: make(chan struct{})}
	go d.run()
	return d, nil
}

func (d *dest) run() {
	defer close(d.done)
	for m := range d.q {
		if d.gone.Load() {
			d.lost.Add(1)
			putBuf(m)
			continue
		}
		if _, err := d.c.Write(m); err != nil {
			d.gone.Store(true)
			d.lost.Add(1)
		}
		putBuf(m)
	}
}

// send queues message m (a pooled buffer); false if the queue is full.
func (d *dest) send(m []byte) bool {
	select {
	case d.q <- m:
		return true
	default:
		return false
	}
}

// close stops the writer: what is queued is still written, unless the
// receiver does not read (the socket is closed after 1 s).
func (d *dest) close() {
	if d.q == nil { // a generation found gone
		return
	}
	close(d.q)
	d.c.SetWriteDeadline(time.Now().Add(time.Second))
	<-d.done
	d.c.Close()
}

func (f *fwdSocket) send(path string, m []byte, flags int) error {
	var serr error
	err := f.raw.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), m, flags, &unix.SockaddrUnix{Name: path})
		return true
	})
	if err != nil {
		return err
	}
	return serr
}

// sendControl sends a control message, retrying while the receiver's queue
// is full, until ctx ends (at most 5 s).
func (f *fwdSocket) sendControl(ctx context.Context, path string, m []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		err := f.send(path, m, unix.MSG_DONTWAIT)
		if !errors.Is(err, unix.EAGAIN) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Millisecond):
		}
	}
}

// decodeData parses a msgData message.
func decodeData(m []byte) (src netip.AddrPort, b []byte, ok bool) {
	if len(m) < 2 {
		return src, nil, false
	}
	n := int(m[1])
	if (n != 4 && n != 16) || len(m) < 2+n+2 {
		return src, nil, false
	}
	ip, _ := netip.AddrFromSlice(m[2 : 2+n])
	port := uint16(m[2+n])<<8 | uint16(m[3+n])
	return netip.AddrPortFrom(ip, port), m[4+n:], true
}
