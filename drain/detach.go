package drain

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
)

// Taking an idle HTTP/1.1 connection away from net/http.
//
// A detachConn wraps every accepted connection. net/http reads through it:
// its connReader, then a bufio.Reader, whose Read calls pass the free part of
// its buffer. To take a connection over without losing or duplicating a
// byte, the bytes net/http has read but not parsed (its bufio buffer) must be
// empty, and no byte may be given to net/http once the take has begun. The
// wrapper proves the first from what net/http does between two requests
// (net/http's conn.serve, Go 1.21 and later):
//
//  1. setState(StateIdle): our ConnState hook marks the connection idle;
//  2. SetReadDeadline (the IdleTimeout, or none): the wrapper enters the
//     peek phase;
//  3. bufr.Peek(4): with 4 or more pipelined bytes buffered it reads nothing;
//     with 1-3 it calls Read with less than the whole buffer; with none it
//     calls Read with the whole buffer;
//  4. SetReadDeadline (ReadHeaderTimeout, or none): the peek phase ends, the
//     request is read.
//
// So a Read in the peek phase, with a buffer as long as the one the
// connection's first Read had (bufio is empty before a connection's first
// request), and before any byte was returned in this phase, is net/http
// waiting for the first byte of the next request with nothing buffered: the
// only state in which a connection is taken. The take (detach) marks the
// connection under the wrapper's lock, then wakes the Read with a deadline in
// the past. The Read, once it returns, takes the lock: marked, it keeps
// whatever bytes it read (they arrived during the take) as the unconsumed
// bytes and returns errDetached, so net/http never sees them; not marked
// (bytes came first), it hands them to net/http as usual, and the take, which
// only marks a connection blocked in that Read, was refused. net/http then
// closes the connection, that is our wrapper: Close keeps the socket open for
// the taker. Every byte is thus either read by net/http, or in the unconsumed
// bytes, or still in the socket's receive queue, and never two of these.
//
// A connection that has never given net/http a byte (StateNew: accepted,
// or served by ServeConn with no unconsumed bytes, its first request still
// to come) is taken the same way while its first Read waits: net/http's
// buffer is empty before that Read returns, whatever its length.
//
// A change in net/http's order of calls makes the checks fail closed when a
// Read has a shorter buffer or comes outside the peek phase (no take);
// TestDetachExactlyOnce pins the sequence.
type detachConn struct {
	sockConn
	mu        sync.Mutex
	full      int    // the length of the first Read's buffer
	idle      bool   // between StateIdle and the end of the peek phase
	fresh     bool   // in StateNew
	deadlines int    // SetReadDeadline calls since StateIdle
	gave      bool   // bytes given to net/http in this peek phase
	everGave  bool   // bytes ever given to net/http
	prefix    []byte // bytes to give before the socket's (ServeConn's unread)
	inRead    int    // the length of the buffer of the Read in progress, 0 if none
	detaching bool
	unread    []byte        // bytes read during the take
	closed    chan struct{} // closed by net/http's Close once detaching
	closeOnce sync.Once
	wakeErr   error // beginDetach's, for finishDetach

	beforeWake func() // tests: runs between the mark and the wake
}

// sockConn is what a detachConn wraps: a *net.TCPConn, or the
// *tlsresume.Conn of a TLS session handed over to us (tlshandover.go).
type sockConn interface {
	net.Conn
	syscall.Conn
	CloseWrite() error
}

// errDetached is what net/http's Read gets once its connection is taken.
var errDetached = errors.New("connection handed over")

// aLongTimeAgo wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// newDetachConn wraps c; net/http reads prefix first (the unconsumed bytes
// of a connection served again), then the socket.
func newDetachConn(c sockConn, prefix []byte) *detachConn {
	return &detachConn{sockConn: c, closed: make(chan struct{}), prefix: prefix}
}

// Read reads from the socket, unless the connection is being taken.
func (c *detachConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.detaching {
		c.mu.Unlock()
		return 0, errDetached
	}
	if c.full == 0 {
		c.full = len(p)
	}
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		c.gave = c.gave || c.idle
		c.everGave = true
		c.mu.Unlock()
		return n, nil
	}
	c.inRead = len(p)
	c.mu.Unlock()
	n, err := c.sockConn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inRead = 0
	if c.detaching {
		c.unread = append(c.unread, p[:n]...)
		return 0, errDetached
	}
	if n > 0 {
		c.gave = c.gave || c.idle
		c.everGave = true
	}
	return n, err
}

// SetReadDeadline passes net/http's deadline on and follows its phases.
func (c *detachConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if c.detaching {
		c.mu.Unlock()
		return nil
	}
	if c.idle {
		c.deadlines++
		if c.deadlines > 1 {
			c.idle = false
		}
	}
	c.mu.Unlock()
	return c.sockConn.SetReadDeadline(t)
}

// Write refuses once the connection is being taken.
func (c *detachConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	d := c.detaching
	c.mu.Unlock()
	if d {
		return 0, neterr.OpConn("write", "tcp", c, errDetached)
	}
	return c.sockConn.Write(p)
}

// Close closes the socket, unless the connection is being taken: then it
// tells the taker net/http has let go.
func (c *detachConn) Close() error {
	c.mu.Lock()
	d := c.detaching
	c.mu.Unlock()
	if d {
		c.closeOnce.Do(func() { close(c.closed) })
		return nil
	}
	return c.sockConn.Close()
}

// state follows net/http's ConnState for c.
func (c *detachConn) state(s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.idle, c.fresh = s == http.StateIdle, s == http.StateNew
	c.deadlines, c.gave = 0, false
}

// takeable reports whether net/http waits for the next request with nothing
// buffered. Called with c.mu held.
func (c *detachConn) takeable() bool {
	if c.detaching || c.inRead == 0 {
		return false
	}
	if c.fresh {
		return !c.everGave
	}
	return c.idle && c.deadlines == 1 && !c.gave && c.inRead == c.full
}

// detach takes the connection from net/http if it is waiting, with nothing
// buffered, for its next request; ok false means not now (try again once it
// is idle). It returns the socket, which the caller owns, and the bytes read
// during the take, which precede what the socket still holds. When ctx ends
// before net/http let go (it always does, at once), the socket is closed
// and ctx's error returned.
func (c *detachConn) detach(ctx context.Context) (conn sockConn, unread []byte, ok bool, err error) {
	if !c.beginDetach() {
		return nil, nil, false, nil
	}
	conn, unread, err = c.finishDetach(ctx)
	return conn, unread, err == nil, err
}

// beginDetach marks the connection taken and wakes net/http's Read, if the
// connection is takeable; finishDetach must follow. Begun on many
// connections first, their takes overlap.
func (c *detachConn) beginDetach() bool {
	c.mu.Lock()
	if !c.takeable() {
		c.mu.Unlock()
		return false
	}
	c.detaching = true
	c.mu.Unlock()
	if c.beforeWake != nil {
		c.beforeWake()
	}
	if err := c.sockConn.SetReadDeadline(aLongTimeAgo); err != nil {
		c.wakeErr = err
	}
	return true
}

// finishDetach waits for net/http to let go of a connection beginDetach
// marked, and returns the socket and the bytes read during the take.
func (c *detachConn) finishDetach(ctx context.Context) (sockConn, []byte, error) {
	if c.wakeErr != nil {
		return nil, nil, c.fail(c.wakeErr)
	}
	select {
	case <-c.closed:
	case <-ctx.Done():
		return nil, nil, c.fail(ctx.Err())
	}
	if err := c.sockConn.SetReadDeadline(time.Time{}); err != nil {
		return nil, nil, c.fail(err)
	}
	c.mu.Lock()
	unread := c.unread
	c.mu.Unlock()
	return c.sockConn, unread, nil
}

// fail closes the socket of a take that could not finish.
func (c *detachConn) fail(err error) error {
	c.sockConn.Close()
	return neterr.OpConn("detach", "tcp", c, err)
}

var (
	_ net.Conn = (*detachConn)(nil)
)

// detachListener wraps every connection it accepts in a detachConn.
type detachListener struct{ net.Listener }

func (l detachListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		return newDetachConn(tc, nil), nil
	}
	return c, err
}

// connListener yields the connections sent on its channel, as if accepted,
// until Close.
type connListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, neterr.Op("accept", "tcp", l.addr, net.ErrClosed)
	}
}

// serve hands c to Accept, or reports false once the listener is closed.
func (l *connListener) serve(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
