package drain

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// lingerBound bounds a lingering close: how long the server reads what its
// client still sends after the server has closed its side.
const lingerBound = 500 * time.Millisecond

// A close with bytes unread in the receive queue, or a segment arriving
// after the close, makes the kernel send a reset (RFC 9293 section 3.6,
// RFC 2525 2.17), and a client that gets it may discard a response it had
// not read yet. A server's close races its client's last bytes on every
// HTTP/2 and TLS connection: a PING's ack, a WINDOW_UPDATE, the client's
// TLS close_notify in answer to the server's. So the drain closes the way
// nginx's lingering_close does: it shuts its write side (the peer reads
// everything written, then EOF), reads and discards until the peer closes
// or lingerBound has passed, and only then closes the socket. The caller's
// Close returns at once; the linger runs in a goroutine, counted by the
// tracker, which Shutdown waits for (bounded by its ctx).

// lingerCloser closes connections lingering.
type lingerCloser struct {
	n    atomic.Int64 // lingering now
	done chan struct{}
	mu   sync.Mutex
}

// close shuts c's write side, then reads and discards, in a goroutine,
// until the peer closes or lingerBound has passed, and closes c.
func (l *lingerCloser) close(c net.Conn) {
	tc, ok := c.(interface{ CloseWrite() error })
	if !ok || tc.CloseWrite() != nil {
		c.Close()
		return
	}
	l.n.Add(1)
	go func() {
		defer l.release()
		c.SetReadDeadline(time.Now().Add(lingerBound))
		io.Copy(io.Discard, c)
		c.Close()
	}()
}

func (l *lingerCloser) release() {
	if l.n.Add(-1) != 0 {
		return
	}
	l.mu.Lock()
	if l.done != nil {
		close(l.done)
		l.done = nil
	}
	l.mu.Unlock()
}

// wait returns when no connection lingers, or when ctx ends.
func (l *lingerCloser) wait(ctx context.Context) error {
	l.mu.Lock()
	if l.n.Load() == 0 {
		l.mu.Unlock()
		return nil
	}
	if l.done == nil {
		l.done = make(chan struct{})
	}
	done := l.done
	l.mu.Unlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the connection under TLS lingering (crypto/tls has written
// its close_notify by now), once.
func (c *tlsRaw) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	c.t.linger.close(c.Conn)
	return nil
}
