package sockets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"

	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

var (
	// ErrClosed is returned by Listen and ListenPacket once the table is
	// closed.
	ErrClosed = errors.New("socket table closed")
	// ErrBadPath: a socket path cannot be used: empty, too long for a unix
	// socket address, or naming something other than a socket.
	ErrBadPath = errors.New("bad socket path")
)

// PathError explains why a socket path cannot be used. It matches
// ErrBadPath.
type PathError struct {
	Path string
	Why  string
}

// Error describes the failure.
func (e *PathError) Error() string { return fmt.Sprintf("%v %q: %s", ErrBadPath, e.Path, e.Why) }

// Is reports whether target is ErrBadPath.
func (e *PathError) Is(target error) bool { return target == ErrBadPath }

// Config configures a Table.
type Config struct {
	// Listen creates fresh sockets, and is what inherited and activated
	// ones are checked against (options, MPTCP).
	Listen reuseport.Config
	// WarnOnMismatch makes Listen log an inherited or activated socket whose
	// options differ from Listen.Options, instead of failing with
	// *reuseport.OptionMismatchError.
	WarnOnMismatch bool
	// Systemd makes New take systemd's activated sockets (LISTEN_FDS) when
	// the process was started with some.
	Systemd bool
	// Logger receives where each socket came from; nil means no logging.
	Logger *zap.Logger
}

// Table is the named sockets of one generation. Safe for concurrent use.
type Table struct {
	cfg Config
	log *zap.Logger
	act *systemd.Activation // nil without activated sockets

	mu        sync.Mutex
	inherited map[string]*Socket // by name, not yet claimed; nil once released
	ours      []*Socket          // in Listen order: what a successor is offered
	names     map[string]bool    // every name Listen was asked for
	closed    bool
}

// New returns the table of a generation that inherited socks (nil for
// none; the table owns them from here). With Config.Systemd it takes
// systemd's activated sockets too (an error parsing LISTEN_* is returned).
func New(cfg Config, socks []*Socket) (*Table, error) {
	t := &Table{cfg: cfg, log: cfg.Logger, inherited: map[string]*Socket{}, names: map[string]bool{}}
	if t.log == nil {
		t.log = zap.NewNop()
	}
	for _, s := range socks {
		t.inherited[s.name] = s
	}
	if cfg.Systemd {
		act, err := systemd.Activated()
		if err != nil {
			for _, s := range socks {
				s.Close()
			}
			return nil, err
		}
		t.act = act
	}
	return t, nil
}

// Activated reports whether systemd passed the process sockets.
func (t *Table) Activated() bool { return t.act != nil }

// Activation is systemd's activation the table takes sockets from (for what
// else systemd passed, as its fd store's session-ticket keys), or nil.
func (t *Table) Activation() *systemd.Activation { return t.act }

// Listen returns the listener called name: the inherited one, if the
// predecessor offered one of that name and kind on that address (a port 0
// matches the inherited port); else systemd's, if it passed one of that
// name or address; else a fresh one, through reuseport for "tcp", "tcp4"
// and "tcp6", or a "unix" listener. An inherited or activated socket's
// options are checked against Config.Listen (see WarnOnMismatch). The
// listener is a *reuseport.Listener for TCP whatever its origin, a
// *net.UnixListener that never unlinks its path for "unix". Each name is
// used once. The caller owns the listener; the table keeps its own
// reference to offer the socket to a successor.
func (t *Table) Listen(ctx context.Context, name, network, address string) (net.Listener, error) {
	if k := KindOf(network); k != TCP && k != Unix {
		return nil, listenError(network, address, net.UnknownNetworkError(network))
	}
	out, err := t.obtain(ctx, name, network, address)
	if err != nil {
		return nil, listenError(network, address, err)
	}
	return out.ln, nil
}

// ListenPacket is Listen for UDP sockets ("udp", "udp4", "udp6"); the conn
// is a *reuseport.PacketConn whatever its origin.
func (t *Table) ListenPacket(ctx context.Context, name, network, address string) (net.PacketConn, error) {
	if KindOf(network) != UDP {
		return nil, listenError(network, address, net.UnknownNetworkError(network))
	}
	out, err := t.obtain(ctx, name, network, address)
	if err != nil {
		return nil, listenError(network, address, err)
	}
	return out.pc, nil
}

// listenError wraps err once in a *net.OpError naming the listen: an error
// that already is one (reuseport's) is returned as it is.
func listenError(network, address string, err error) error {
	return neterr.OpText("listen", network, address, err)
}

// obtain finds or creates socket name, and registers our reference to it.
func (t *Table) obtain(ctx context.Context, name, network, address string) (*obtained, error) {
	kind := KindOf(network)
	s, err := t.claim(name, kind, network, address)
	if err != nil {
		return nil, err
	}
	var out *obtained
	switch {
	case s != nil:
		out, err = t.adopt(s, network)
	default:
		s, out, err = t.activated(ctx, name, kind, network, address)
		if err == nil && s == nil {
			s, out, err = t.fresh(ctx, name, kind, network, address)
		}
	}
	if err == nil {
		if err = s.describe(out); err != nil {
			unix.Close(s.fd)
			closeObtained(out)
		}
	}
	if err != nil {
		return nil, err
	}
	t.add(s)
	return out, nil
}

// claim reserves name and takes the inherited socket of that name, if it
// matches kind and address.
func (t *Table) claim(name string, kind Kind, network, address string) (*Socket, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return nil, ErrClosed
	case t.names[name]:
		return nil, fmt.Errorf("socket name %q already in use", name)
	}
	t.names[name] = true
	s, ok := t.inherited[name]
	if !ok {
		return nil, nil
	}
	want, ok := wantAddr(network, address)
	if s.kind != kind || !ok || !SameAddr(want, s.address) {
		t.log.Info("inherited socket does not match; listening fresh", zap.String("event", "handoff.listen.mismatch"), zap.String("name", name),
			zap.String("inherited", s.network+" "+s.address), zap.String("asked", network+" "+address))
		return nil, nil
	}
	delete(t.inherited, name)
	return s, nil
}

// check compares the options of a socket we did not create with
// Config.Listen's, for network: a mismatch fails, or is logged with
// WarnOnMismatch.
func (t *Table) check(s *Socket, network string, err error) error {
	if err == nil {
		return nil
	}
	var mm *reuseport.OptionMismatchError
	if !t.cfg.WarnOnMismatch || !errors.As(err, &mm) {
		return err
	}
	t.log.Warn("socket's options differ from Config.Listen", zap.String("event", "handoff.listen.options"), zap.String("name", s.name),
		zap.String("origin", string(s.origin)), zap.Error(err))
	return nil
}

// adopt checks an inherited socket's options and hands over the listener
// Prepare built for it.
func (t *Table) adopt(s *Socket, network string) (*obtained, error) {
	if s.kind != Unix {
		err := s.checkErr
		if s.checked != network {
			err = t.cfg.Listen.Check(network, s.sock)
		}
		if err = t.check(s, network, err); err != nil {
			s.Close()
			return nil, err
		}
	}
	out := s.pre
	s.pre = nil
	if out == nil {
		s.Close()
		return nil, fmt.Errorf("inherited socket %q was not prepared", s.name)
	}
	t.log.Info("inherited", zap.String("event", "handoff.listen.inherited"), zap.String("name", s.name), zap.String("address", s.address))
	return out, nil
}

// activated takes name from systemd socket activation, if any: the same
// kind of listener as every origin, its options checked like an inherited
// socket's, and the socket marked as held by systemd.
func (t *Table) activated(ctx context.Context, name string, kind Kind, network, address string) (*Socket, *obtained, error) {
	if t.act == nil {
		return nil, nil, nil
	}
	f, ok, err := t.act.Take(name, network, address)
	if err != nil || !ok {
		return nil, nil, err
	}
	defer f.Close()
	fd, err := linux.DupConn(f)
	if err != nil {
		return nil, nil, err
	}
	shared.Mark(fd, shared.Systemd) // a failure leaves drain to its holder scan
	s := &Socket{name: name, kind: kind, network: network, origin: Systemd, fd: fd}
	if kind != Unix {
		so, err := reuseport.ReadFD(fd)
		if err == nil {
			s.sock = so
			err = t.check(s, network, t.cfg.Listen.Check(network, so))
		}
		if err != nil {
			unix.Close(fd)
			return nil, nil, err
		}
	}
	out, err := wrapFile(f, kind, s.sock)
	if err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	t.log.Info("from systemd", zap.String("event", "handoff.listen.systemd"), zap.String("name", name), zap.String("network", network), zap.String("address", address))
	return s, out, nil
}

// fresh creates the socket.
func (t *Table) fresh(ctx context.Context, name string, kind Kind, network, address string) (*Socket, *obtained, error) {
	var c syscall.Conn
	out := &obtained{}
	switch kind {
	case TCP:
		l, err := t.cfg.Listen.Listen(ctx, network, address)
		if err != nil {
			return nil, nil, err
		}
		c, out.ln = l, l
	case UDP:
		p, err := t.cfg.Listen.ListenPacket(ctx, network, address)
		if err != nil {
			return nil, nil, err
		}
		c, out.pc = p, p
	default:
		l, err := listenUnix(address)
		if err != nil {
			return nil, nil, err
		}
		c, out.ln = l, l
	}
	fd, err := linux.DupConn(c)
	if err != nil {
		closeObtained(out)
		return nil, nil, err
	}
	t.log.Info("listening fresh", zap.String("event", "handoff.listen.fresh"), zap.String("name", name), zap.String("network", network), zap.String("address", address))
	return &Socket{name: name, kind: kind, network: network, origin: Fresh, fd: fd}, out, nil
}

// add registers s, whose fd is our reference; once the table is closed it
// closes s's fd instead (the caller keeps its listener).
func (t *Table) add(s *Socket) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		unix.Close(s.fd)
		return
	}
	t.ours = append(t.ours, s)
}

// Offer returns the sockets Listen and ListenPacket returned, in their
// order: what a successor is offered. Their fds stay valid until Close.
func (t *Table) Offer() []*Socket {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]*Socket(nil), t.ours...)
}

// Unclaimed returns the names of the inherited sockets no Listen claimed
// and of the activated ones no Listen took.
func (t *Table) Unclaimed() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var names []string
	for name := range t.inherited {
		names = append(names, name)
	}
	if t.act != nil {
		names = append(names, t.act.Available()...)
	}
	return names
}

// CloseUnclaimed closes the inherited sockets no Listen claimed (a process
// that serves calls it once it has claimed all it will: those sockets would
// otherwise stay open, their queues unserved) and returns how many it
// closed; Listen finds no inherited socket from then on.
func (t *Table) CloseUnclaimed() int {
	t.mu.Lock()
	rest := t.inherited
	t.inherited = nil
	t.mu.Unlock()
	for name, s := range rest {
		t.log.Warn("inherited socket not claimed by Listen; closing it", zap.String("event", "handoff.unclaimed"), zap.String("name", name), zap.String("address", s.address))
		s.Close()
	}
	return len(rest)
}

// Close closes the table's references to its sockets (the listeners Listen
// returned stay open: their callers own them), the inherited sockets no
// Listen claimed, and systemd's activated fds no Listen took. Listen fails
// with ErrClosed from then on. Call it only once nothing can be offering the
// sockets to a successor any more. Safe to call more than once.
func (t *Table) Close() error {
	t.CloseUnclaimed()
	t.mu.Lock()
	ours := t.ours
	t.ours, t.closed = nil, true
	t.mu.Unlock()
	for _, s := range ours {
		unix.Close(s.fd)
	}
	if t.act != nil {
		return t.act.Close()
	}
	return nil
}

// listenUnix listens on a unix path, replacing a stale socket file (a socket
// whose connect is refused) and nothing else: any other file at path is an
// error. It never unlinks path on Close. Errors are not wrapped in a
// *net.OpError: Listen wraps them once.
func listenUnix(path string) (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if errors.Is(err, syscall.EADDRINUSE) && (path == "" || path[0] != '@') {
		var st unix.Stat_t
		if lerr := unix.Lstat(path, &st); lerr == nil && st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, &PathError{Path: path, Why: "exists and is a " + linux.FileType(st.Mode) + ", not a socket: not replacing it"}
		}
		if c, derr := net.Dial("unix", path); derr == nil {
			c.Close()
		} else if errors.Is(derr, syscall.ECONNREFUSED) && sameFile(path, st.Ino) {
			os.Remove(path)
			l, err = net.ListenUnix("unix", addr)
		}
	}
	if oe := (*net.OpError)(nil); errors.As(err, &oe) {
		return nil, oe.Err
	}
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false)
	return l, nil
}

// sameFile reports whether path is still the socket file of inode ino.
func sameFile(path string, ino uint64) bool {
	var st unix.Stat_t
	return unix.Lstat(path, &st) == nil && st.Ino == ino && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}
