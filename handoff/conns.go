package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
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

// validateConn checks a received fd against its declaration: a socket, of
// TCP (TCP_INFO answers only for TCP), established (or in CLOSE_WAIT: the
// client closed during the transfer; what it sent is still to be read), of
// the declared family, bound to the declared local address and connected
// to the declared peer; it returns the socket's inode. Each failure is a
// *ValidationError. It costs five syscalls, not the forty of a listener's
// full read (reuseport.ReadFD): a handoff may pass tens of thousands of
// connections.
func validateConn(fd int, d *connDecl) (ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &ValidationError{Name: d.Name, Check: "fstat", Want: "socket", Got: "?", Err: os.NewSyscallError("fstat", err)}
	}
	return st.Ino, checkConn(fd, d, &st)
}

// checkConn is validateConn's checks of fd, whose fstat is st.
func checkConn(fd int, d *connDecl, st *unix.Stat_t) error {
	bad := func(check, want, got string, err error) error {
		return &ValidationError{Name: d.Name, Check: check, Want: want, Got: got, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return bad("S_IFSOCK", "socket", "file mode "+strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8), nil)
	}
	ti, err := linux.TCPInfo(fd)
	if err != nil {
		return bad("TCP_INFO", "a TCP connection", "?", err)
	}
	if ti.State != unix.BPF_TCP_ESTABLISHED && ti.State != unix.BPF_TCP_CLOSE_WAIT {
		return bad("TCP_INFO", "established", "state "+strconv.Itoa(int(ti.State)), nil)
	}
	local, err := linux.Sockname(fd)
	if err != nil {
		return bad("getsockname", d.Address, "?", err)
	}
	if got := connNetwork(local); d.Network != "tcp" && d.Network != got {
		return bad("family", d.Network, got, nil)
	}
	if !exactAddr(d.Address, local) {
		return bad("getsockname", d.Address, local, nil)
	}
	peer, err := linux.Peername(fd)
	if err != nil {
		return bad("getpeername", d.Peer, "?", err)
	}
	if !exactAddr(d.Peer, peer) {
		return bad("getpeername", d.Peer, peer, nil)
	}
	return nil
}

// declareConn declares the connected socket fd as the listener name's,
// with state: its family and addresses as the kernel has them (an IPv4
// client of a dual-stack listener is an AF_INET6 socket with a mapped
// address, declared tcp6).
func declareConn(fd int, name string, state []byte) (connDecl, error) {
	local, err := linux.Sockname(fd)
	if err != nil {
		return connDecl{}, err
	}
	peer, err := linux.Peername(fd)
	if err != nil {
		return connDecl{}, err
	}
	return connDecl{socketInfo: socketInfo{Name: name, Kind: kindTCPConn, Network: connNetwork(local), Address: local}, Peer: peer, State: state}, nil
}

// connNetwork is "tcp6" for an address linux.Sockname formatted from an
// AF_INET6 socket ("[ip]:port"), else "tcp4".
func connNetwork(addr string) string {
	if strings.HasPrefix(addr, "[") {
		return "tcp6"
	}
	return "tcp4"
}

// exactAddr compares two literal addresses, ports included: a connection's
// addresses have no wildcard.
func exactAddr(want, got string) bool {
	w, err1 := netip.ParseAddrPort(want)
	g, err2 := netip.ParseAddrPort(got)
	return err1 == nil && err2 == nil && w.Port() != 0 && w.Addr().Unmap() == g.Addr().Unmap() && w.Port() == g.Port()
}

// PassedConn is a connection passed from one generation to the next.
type PassedConn struct {
	// Listener is the name (as given to Listen) of the listener the
	// connection was accepted on; the successor's handler for that name
	// receives it.
	Listener string
	// Conn is the connection. PassConns closes the sender's once the
	// successor has it; the receiver owns the one its handler gets.
	Conn *net.TCPConn
	// State is opaque to this package, at most MaxConnState bytes: what the
	// receiver needs to go on (for HTTP, the bytes read but not consumed).
	State []byte
}

// HandleConns registers h to receive the connections a predecessor passes
// for the listener name, in this process's successor role: once Ready has
// told the predecessor which listeners' connections it takes (every name
// registered), each connection passed arrives as one call of h, on one
// goroutine, in order. h owns the connection; it must not block for long
// (hand it to a server). Call it before Ready. A predecessor of protocol
// version 1 passes none.
func (u *Upgrader) HandleConns(name string, h func(PassedConn)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case h == nil:
		return u.opError(errors.New("handle conns: nil handler"))
	case u.closed:
		return u.opError(fmt.Errorf("handle conns: %w", ErrClosed))
	case u.ready:
		return u.opError(errors.New("handle conns: called after Ready"))
	}
	u.pass.handle(name, h)
	return nil
}

// listenerAddrs is the bound address of each of our sockets, by name: a
// connection passed for a name must have been accepted on it.
func (u *Upgrader) listenerAddrs() map[string]string {
	addrs := map[string]string{}
	for _, s := range u.table.Offer() {
		addrs[s.Name()] = s.Address()
	}
	return addrs
}

// TakesConns reports whether a successor is ready and takes the connections
// of the listener name: PassConns can then pass them. It becomes true
// before Exit is closed, and false once the conversation with the successor
// has failed or the Upgrader is closed.
func (u *Upgrader) TakesConns(name string) bool {
	s := u.pass.successor()
	return s != nil && s.Takes(name)
}

// StopTakingConns ends the conversations on which a predecessor passes
// this process connections: a batch not acknowledged yet stays the
// predecessor's (its PassConns fails with ErrNotTaken), and so do later
// ones. It returns once every connection acknowledged has been given to its
// handler. Call it before the handlers stop taking connections (a
// drain.Server's ServeConn closes a connection late in its Shutdown): a
// connection acknowledged after that would be closed. Passing our own
// connections to a successor (PassConns) goes on. Safe to call more than
// once, and concurrently.
func (u *Upgrader) StopTakingConns() { u.pass.stopReceiving() }

// ErrNotTaken: the connections were not passed (no successor takes them, or
// it refused or did not acknowledge them); they are still the caller's.
var ErrNotTaken = errors.New("connections not taken by a successor")

// PassConns passes conns to the ready successor: see ConnSender.PassConns.
// Without a successor that takes connections, it fails with ErrNotTaken.
func (u *Upgrader) PassConns(ctx context.Context, conns []PassedConn) (passed int, err error) {
	s := u.pass.successor()
	if s == nil {
		return 0, u.opError(fmt.Errorf("pass conns: no successor takes connections: %w", ErrNotTaken))
	}
	return s.PassConns(ctx, conns)
}

// passing is an Upgrader's connection passing, in both roles: the handlers
// registered for the connections a predecessor passes us and the
// conversations on which it does (preds), and the conversation with a ready
// successor that takes ours (succ). It has its own lock; the Upgrader owns
// it, and closes it first when it is closed.
type passing struct {
	log   *zap.Logger
	opErr func(error) error

	mu       sync.Mutex
	handlers map[string]func(PassedConn)
	succ     *ConnSender
	preds    []*conn
	closed   bool
	stopped  bool           // stopReceiving was called: preds are closed at once
	wg       sync.WaitGroup // the goroutines receiving on preds
	handed   handed         // the connections handed to our handlers
}

// handle registers h for the connections of the listener name.
func (p *passing) handle(name string, h func(PassedConn)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handlers == nil {
		p.handlers = map[string]func(PassedConn){}
	}
	p.handlers[name] = h
}

// takes returns the names of the listeners we have a handler for, sorted.
func (p *passing) takes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.handlers))
	for name := range p.handlers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// successor returns the sender to the ready successor that takes
// connections, or nil.
func (p *passing) successor() *ConnSender {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.succ
}

// keepSuccessor keeps the conversation with a ready successor that takes
// the connections of takes, for PassConns; c is ours from now on.
func (p *passing) keepSuccessor(c *conn, takes []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return
	}
	p.succ = &ConnSender{c: c, takes: takes, log: p.log, opErr: p.opErr}
}

// receiveFrom receives, on its own goroutine, the connections the
// predecessor passes on pred, for the handlers registered so far, each
// accepted on the address addrs has for its listener's name; pred is ours
// from now on.
func (p *passing) receiveFrom(pred *conn, addrs map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.stopped {
		pred.Close()
		return
	}
	handlers := make(map[string]func(PassedConn), len(p.handlers))
	for name, h := range p.handlers {
		handlers[name] = h
	}
	p.preds = append(p.preds, pred)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		receiveConns(pred, &receiver{handlers: handlers, addrs: addrs, handed: &p.handed, idle: connWait, log: p.log})
	}()
}

// stopReceiving ends the conversations with predecessors and waits for
// their goroutines (each gives what it acknowledged to its handlers first).
func (p *passing) stopReceiving() {
	p.mu.Lock()
	p.stopped = true
	preds := p.preds
	p.preds = nil
	p.mu.Unlock()
	for _, c := range preds {
		c.Close()
	}
	p.wg.Wait()
}

// close ends the conversation with the successor (it has every connection
// it acked) and those with predecessors, and waits for the receiving
// goroutines. Later conversations given to it are closed at once.
func (p *passing) close() {
	p.mu.Lock()
	p.closed = true
	succ, preds := p.succ, p.preds
	p.succ, p.preds = nil, nil
	p.mu.Unlock()
	if succ != nil {
		succ.Close()
	}
	for _, c := range preds {
		c.Close()
	}
	p.wg.Wait()
}

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

// Test hooks: testHookConnsSent runs after each conns batch is sent,
// testHookConnsReceived once a batch is validated, before its ack.
var testHookConnsSent, testHookConnsReceived func(first int)
