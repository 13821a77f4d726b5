package handoff

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

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

// connWait bounds how long a successor waits for the next batch of
// connections from its predecessor, which closes the conversation when it
// is done (a ConnListener waits its ConnsConfig.Timeout: a sibling's
// conversation holds one of a few slots).
const connWait = time.Hour

// receiver is what a receiving side checks passed connections against and
// gives them to: a handler and the bound address of each listener whose
// connections it takes, and the connections handed so far (shared by every
// conversation of one Upgrader, or of one ConnListener).
type receiver struct {
	handlers map[string]func(PassedConn)
	addrs    map[string]string // listener name: its bound address
	handed   *handed
	idle     time.Duration // the wait for the next batch
	log      *zap.Logger
}

// receiveConns is the receiving side of the connection passing: it reads
// batches until the sender hangs up, the Upgrader or ConnListener is
// closed, or no batch came for r.idle (the conversation then ends: no
// batch is pending), validates each fd, acks the batch, and then gives
// each connection to its listener's handler. A batch that fails is refused
// with an error frame and closed here: the sender still has every
// connection of it.
func receiveConns(c *conn, r *receiver) {
	defer c.Close()
	log := r.log
	for n := 0; ; {
		f, fds, err := c.recvWithin(BatchFDs, r.idle)
		if err == nil {
			err = expect(f, typeConns)
		}
		if err == nil && (f.First != n || len(fds) != f.Count) {
			err = &FrameError{Type: typeConns, Err: ErrFDCount, Detail: fmt.Sprintf("batch first=%d count=%d with %d fds, expected first=%d", f.First, f.Count, len(fds), n)}
		}
		var got []PassedConn
		if err == nil {
			got, err = r.adoptConns(f.Conns, fds)
		} else {
			closeFDs(fds)
		}
		if err == nil && testHookConnsReceived != nil {
			testHookConnsReceived(n)
		}
		if err == nil {
			if err = c.send(&frame{Type: typeAck, Received: n + len(got)}, nil); err != nil {
				for _, pc := range got {
					pc.Conn.Close()
				}
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && f == nil {
				log.Info("no connections came within the wait; hanging up", zap.String("event", "handoff.conns_idle"), zap.Int("received", n), zap.Duration("wait", r.idle))
				return
			}
			if !predecessorGone(err) && !errors.Is(err, net.ErrClosed) {
				log.Warn("connections refused; the sender keeps them", zap.String("event", "handoff.conns_refused"), zap.Int("received", n), zap.Error(err))
				if !errors.As(err, new(*RemoteError)) {
					c.send(&frame{Type: typeError, Code: code(err), Message: err.Error()}, nil)
				}
			} else {
				log.Debug("the sender is done passing connections", zap.String("event", "handoff.conns_end"), zap.Int("received", n))
			}
			return
		}
		n += len(got)
		log.Debug("connections received", zap.String("event", "handoff.conns_received"), zap.Int("count", len(got)), zap.Int("total", n))
		for _, pc := range got {
			r.handlers[pc.Listener](pc)
		}
	}
}

// adoptConns validates every fd of a batch against its declaration and
// makes a connection of each, on up to GOMAXPROCS goroutines (each costs
// some ten syscalls), then checks that no socket of it comes twice or was
// handed before and is still open. On error it closes every fd and
// connection of the batch and returns the first error in batch order.
func (r *receiver) adoptConns(decls []connDecl, fds []int) ([]PassedConn, error) {
	out := make([]PassedConn, len(fds))
	inos := make([]uint64, len(fds))
	errs := make([]error, len(fds))
	workers := min(runtime.GOMAXPROCS(0), len(fds))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(fds); i += workers {
				out[i], inos[i], errs[i] = r.adoptConn(&decls[i], fds[i])
			}
		}()
	}
	wg.Wait()
	var err error
	for _, e := range errs {
		if e != nil {
			err = e
			break
		}
	}
	if err == nil {
		err = r.handed.admit(out, inos)
	}
	if err != nil {
		for _, pc := range out {
			if pc.Conn != nil {
				pc.Conn.Close()
			}
		}
		return nil, err
	}
	return out, nil
}

// adoptConn validates fd, bound to the address of the listener it is
// declared for, and makes a connection of it; it returns the socket's
// inode. It always closes fd (net.FileConn makes a dup).
func (r *receiver) adoptConn(d *connDecl, fd int) (PassedConn, uint64, error) {
	ino, err := validateConn(fd, d)
	if err == nil && r.handlers[d.Name] == nil {
		err = &ValidationError{Name: d.Name, Check: "listener", Want: "a listener whose connections we take", Got: d.Name}
	}
	if err == nil && !onListener(r.addrs[d.Name], d.Address) {
		err = &ValidationError{Name: d.Name, Check: "listener address", Want: "a connection accepted on " + r.addrs[d.Name], Got: "one to " + d.Address}
	}
	if err != nil {
		closeFDs([]int{fd})
		return PassedConn{}, 0, err
	}
	f := os.NewFile(uintptr(fd), d.Name)
	nc, err := net.FileConn(f) // a dup
	f.Close()
	if err != nil {
		return PassedConn{}, 0, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		nc.Close()
		return PassedConn{}, 0, &ValidationError{Name: d.Name, Check: "net.FileConn", Want: "*net.TCPConn", Got: fmt.Sprintf("%T", nc)}
	}
	return PassedConn{Listener: d.Name, Conn: tc, State: d.State}, ino, nil
}

// onListener reports whether a connection bound to local (validated: a
// literal address) was accepted on a listener bound to listen: the same
// port, and the same IP unless the listener's is unspecified (then of its
// family; an IPv6 one takes IPv4 clients too).
func onListener(listen, local string) bool {
	lh, lp, err1 := net.SplitHostPort(listen)
	ch, cp, err2 := net.SplitHostPort(local)
	if err1 != nil || err2 != nil || lp != cp {
		return false
	}
	ca, err := netip.ParseAddr(ch)
	if err != nil {
		return false
	}
	if lh == "" {
		return true
	}
	la, err := netip.ParseAddr(lh)
	switch {
	case err != nil:
		return false
	case la.IsUnspecified():
		return la.Is6() || ca.Unmap().Is4()
	}
	return la.WithZone("").Unmap() == ca.WithZone("").Unmap()
}

// handed is the connections a receiver has handed to its handlers, by
// socket inode, for as long as they are open: a socket passed twice in a
// batch, or again while a connection of ours holds it, is refused, so that
// no two servers of ours share one. Closed ones are swept out as the set
// doubles.
type handed struct {
	mu    sync.Mutex
	conns map[uint64]*net.TCPConn
	live  int // open after the last sweep
}

// admit checks the batch conns (sockets inos) and records it.
func (h *handed) admit(conns []PassedConn, inos []uint64) error {
	twice := func(i int, why string) error {
		return &ValidationError{Name: conns[i].Listener, Check: "inode", Want: "a socket not passed before", Got: "socket inode " + strconv.FormatUint(inos[i], 10) + ", " + why}
	}
	first := make(map[uint64]int, len(inos))
	for i, ino := range inos {
		if j, ok := first[ino]; ok {
			return twice(i, "also connection "+strconv.Itoa(j)+" of the batch")
		}
		first[ino] = i
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, ino := range inos {
		if c := h.conns[ino]; c != nil && holds(c, ino) {
			return twice(i, "handed over to us before and still open")
		}
	}
	if h.conns == nil {
		h.conns = map[uint64]*net.TCPConn{}
	}
	for i, ino := range inos {
		h.conns[ino] = conns[i].Conn
	}
	if len(h.conns) > max(1024, 2*h.live) {
		for ino, c := range h.conns {
			if !holds(c, ino) {
				delete(h.conns, ino)
			}
		}
		h.live = len(h.conns)
	}
	return nil
}

// holds reports whether c is open on the socket ino.
func holds(c *net.TCPConn, ino uint64) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		return false
	}
	return st.Ino == ino
}

// testHookConnsReceived is a test hook: it runs once a conns batch is
// validated, before its ack.
var testHookConnsReceived func(first int)
