package quicdrain

import (
	"net"
	"os"
	"sync"
	"time"
)

// packet is one datagram for the generation's own quic.Transport.
type packet struct {
	buf  []byte
	n    int
	from *net.UDPAddr
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 2048); return &b }}

// packetConn is the net.PacketConn the generation's quic.Transport runs on:
// ReadFrom returns the datagrams the generation routed to itself (read from
// the UDP socket, or forwarded by a newer generation), WriteTo writes to the
// shared UDP socket directly.
type packetConn struct {
	udp *net.UDPConn
	in  chan packet

	closeOnce sync.Once
	closed    chan struct{}

	mu       sync.Mutex
	deadline time.Time
	wake     chan struct{} // closed and replaced when the deadline changes
}

var _ net.PacketConn = (*packetConn)(nil)

func newPacketConn(udp *net.UDPConn, queue int) *packetConn {
	return &packetConn{udp: udp, in: make(chan packet, queue), closed: make(chan struct{}), wake: make(chan struct{})}
}

// deliver queues a copy of b from addr; false if the queue is full or the
// conn closed (the datagram is dropped).
func (c *packetConn) deliver(b []byte, from *net.UDPAddr) bool {
	var buf []byte
	if len(b) <= 2048 {
		buf = *bufPool.Get().(*[]byte)
	} else {
		buf = make([]byte, len(b))
	}
	n := copy(buf, b)
	select {
	case <-c.closed:
	case c.in <- packet{buf: buf, n: n, from: from}:
		return true
	default:
	}
	putBuf(buf)
	return false
}

func putBuf(b []byte) {
	if cap(b) == 2048 {
		b = b[:2048]
		bufPool.Put(&b)
	}
}

// ReadFrom implements net.PacketConn.
func (c *packetConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		c.mu.Lock()
		d, wake := c.deadline, c.wake
		c.mu.Unlock()
		var timer <-chan time.Time
		if !d.IsZero() {
			wait := time.Until(d)
			if wait <= 0 {
				return 0, nil, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			timer = t.C
		}
		select {
		case pk := <-c.in:
			n := copy(p, pk.buf[:pk.n])
			putBuf(pk.buf)
			return n, pk.from, nil
		case <-c.closed:
			return 0, nil, net.ErrClosed
		case <-wake:
		case <-timer:
		}
	}
}

// WriteTo implements net.PacketConn: it writes on the shared UDP socket.
func (c *packetConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	return c.udp.WriteTo(p, addr)
}

// Close implements net.PacketConn; the UDP socket stays open (the
// generation closes it).
func (c *packetConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return nil
}

// LocalAddr implements net.PacketConn.
func (c *packetConn) LocalAddr() net.Addr { return c.udp.LocalAddr() }

// SetDeadline implements net.PacketConn (the write deadline is ignored:
// writes go to the UDP socket, which does not block long).
func (c *packetConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

// SetReadDeadline implements net.PacketConn.
func (c *packetConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline implements net.PacketConn; see SetDeadline.
func (c *packetConn) SetWriteDeadline(time.Time) error { return nil }

// SetReadBuffer does nothing: quic-go asks for a large buffer, but a
// socket's options must stay what its generation declared, or the handoff
// to the successor fails validation. Size the buffers where the socket is
// created (handoff.Config.Listen), so that every generation declares them.
func (c *packetConn) SetReadBuffer(int) error { return nil }

// SetWriteBuffer does nothing; see SetReadBuffer.
func (c *packetConn) SetWriteBuffer(int) error { return nil }
