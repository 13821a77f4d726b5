package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Listen returns the listener called name: the predecessor's, if it offered
// one of that name and kind on that address (checked against Config.Listen:
// options that differ fail with *reuseport.OptionMismatchError unless
// WarnOnMismatch); else systemd's, if activated; else a fresh one, through
// reuseport for "tcp", "tcp4", "tcp6", or a "unix" listener. A port 0 matches
// the inherited port. Unix listeners never unlink their path on Close, so
// neither the predecessor's nor ours removes the file the other uses. The
// listener is a *reuseport.Listener for "tcp", "tcp4" and "tcp6" whatever its
// origin (so Digest and Effective are always there), a *net.UnixListener for
// "unix". The caller owns the listener; the Upgrader keeps its own reference
// (a dup) to offer the socket to a successor.
func (u *Upgrader) Listen(ctx context.Context, name, network, address string) (net.Listener, error) {
	kind := map[string]string{"tcp": kindTCP, "tcp4": kindTCP, "tcp6": kindTCP, "unix": kindUnix}[network]
	if kind == "" {
		return nil, listenError(network, address, net.UnknownNetworkError(network))
	}
	f, err := u.obtain(ctx, name, kind, network, address)
	if err != nil {
		return nil, listenError(network, address, err)
	}
	return f.ln, nil
}

// ListenPacket is Listen for UDP sockets ("udp", "udp4", "udp6"); the conn is
// a *reuseport.PacketConn whatever its origin.
func (u *Upgrader) ListenPacket(ctx context.Context, name, network, address string) (net.PacketConn, error) {
	kind := map[string]string{"udp": kindUDP, "udp4": kindUDP, "udp6": kindUDP}[network]
	if kind == "" {
		return nil, listenError(network, address, net.UnknownNetworkError(network))
	}
	f, err := u.obtain(ctx, name, kind, network, address)
	if err != nil {
		return nil, listenError(network, address, err)
	}
	return f.pc, nil
}

// listenError wraps err once in a *net.OpError naming the listen: an error
// that already is one (reuseport's) is returned as it is.
func listenError(network, address string, err error) error {
	return neterr.OpText("listen", network, address, err)
}

// obtained is a socket for the caller: a listener or a packet conn.
type obtained struct {
	ln net.Listener
	pc net.PacketConn
}

// obtain finds or creates socket name, and registers our reference to it.
func (u *Upgrader) obtain(ctx context.Context, name, kind, network, address string) (*obtained, error) {
	s, err := u.claim(name, kind, network, address)
	if err != nil {
		return nil, err
	}
	var out *obtained
	switch {
	case s != nil:
		out, err = u.adopt(s, network)
	default:
		s, out, err = u.activated(name, kind, network, address)
		if err == nil && s == nil {
			s, out, err = u.fresh(ctx, name, kind, network, address)
		}
	}
	if err == nil {
		if err = s.describe(out); err != nil {
			closeFDs([]int{s.fd})
			closeObtained(out)
		}
	}
	if err != nil {
		return nil, err
	}
	u.reg.add(s) // closed: we keep no reference, the caller has the socket
	return out, nil
}

// claim reserves name and takes the inherited socket of that name, if it
// matches kind and address.
func (u *Upgrader) claim(name, kind, network, address string) (*socket, error) {
	u.mu.Lock() // Ready and Close release u.inh under it
	defer u.mu.Unlock()
	if err := u.reg.reserve(name); err != nil { // ErrClosed once closed
		return nil, err
	}
	info, ok := u.inh.declared(name)
	if !ok {
		return nil, nil
	}
	want, ok := wantAddr(network, address)
	if info.Kind != kind || !ok || !sameAddr(want, info.Address) {
		u.log.Info("inherited socket does not match; listening fresh", zap.String("event", "handoff.listen.mismatch"), zap.String("name", name),
			zap.String("inherited", info.Network+" "+info.Address), zap.String("asked", network+" "+address))
		return nil, nil
	}
	s, _ := u.inh.take(name)
	return s, nil
}

// adopt checks an inherited socket's options and hands over the listener
// built for it while it was validated.
func (u *Upgrader) adopt(s *socket, network string) (*obtained, error) {
	if s.info.Kind != kindUnix {
		err := s.checkErr
		if s.checked != network {
			err = u.cfg.Listen.Check(network, s.sock)
		}
		if err != nil {
			var mm *reuseport.OptionMismatchError
			if !u.cfg.WarnOnMismatch || !errors.As(err, &mm) {
				s.close()
				return nil, err
			}
			u.log.Warn("inherited socket's options differ from Config.Listen", zap.String("event", "handoff.listen.options"), zap.String("name", s.info.Name), zap.Error(err))
		}
	}
	out := s.pre
	s.pre = nil
	u.log.Info("inherited", zap.String("event", "handoff.listen.inherited"), zap.String("name", s.info.Name), zap.String("address", s.info.Address))
	return out, nil
}

// describe records, once, what offer declares for the socket: its bound
// address and, for inet sockets, its options, taken from what reuseport read
// of the caller's listener (or read now). Neither changes while we hold the
// socket: options are set before bind, and a bound socket stays bound.
func (s *socket) describe(out *obtained) error {
	if s.sock == nil {
		s.sock = socketOf(out)
	}
	if s.sock == nil {
		so, err := reuseport.ReadFD(s.fd)
		if err != nil {
			return err
		}
		s.sock = so
	}
	if s.info.Address == "" {
		s.info.Address = s.sock.Address()
	}
	return nil
}

// socketOf returns what reuseport read of the caller's socket, if it did.
func socketOf(out *obtained) *reuseport.Socket {
	switch {
	case out == nil:
	case out.ln != nil:
		if l, ok := out.ln.(*reuseport.Listener); ok {
			return l.Socket()
		}
	case out.pc != nil:
		if p, ok := out.pc.(*reuseport.PacketConn); ok {
			return p.Socket()
		}
	}
	return nil
}

// activated takes name from systemd socket activation, if any.
func (u *Upgrader) activated(name, kind, network, address string) (*socket, *obtained, error) {
	if u.inh.act == nil {
		return nil, nil, nil
	}
	f, ok, err := u.inh.act.Take(name, network, address)
	if err != nil || !ok {
		return nil, nil, err
	}
	fd, err := dupConn(f)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	out, err := wrapFile(f, kind, nil)
	f.Close()
	if err != nil {
		closeFDs([]int{fd})
		return nil, nil, err
	}
	shared.Mark(fd, shared.Systemd) // a failure leaves drain to its holder scan
	u.log.Info("from systemd", zap.String("event", "handoff.listen.systemd"), zap.String("name", name), zap.String("network", network), zap.String("address", address))
	return &socket{info: socketInfo{Name: name, Kind: kind, Network: network}, fd: fd}, out, nil
}

// fresh creates the socket.
func (u *Upgrader) fresh(ctx context.Context, name, kind, network, address string) (*socket, *obtained, error) {
	var c syscall.Conn
	out := &obtained{}
	switch kind {
	case kindTCP:
		l, err := u.cfg.Listen.Listen(ctx, network, address)
		if err != nil {
			return nil, nil, err
		}
		c, out.ln = l, l
	case kindUDP:
		p, err := u.cfg.Listen.ListenPacket(ctx, network, address)
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
	fd, err := dupConn(c)
	if err != nil {
		c.(interface{ Close() error }).Close()
		return nil, nil, err
	}
	u.log.Info("listening fresh", zap.String("event", "handoff.listen.fresh"), zap.String("name", name), zap.String("network", network), zap.String("address", address))
	return &socket{info: socketInfo{Name: name, Kind: kind, Network: network}, fd: fd}, out, nil
}

// listenUnix listens on a unix path, replacing a stale socket file (a socket
// whose connect is refused) and nothing else: any other file at path is a
// *PathError. It never unlinks path on Close. Errors are not wrapped in a
// *net.OpError: Listen wraps them once.
func listenUnix(path string) (*net.UnixListener, error) {
	addr := &net.UnixAddr{Name: path, Net: "unix"}
	l, err := net.ListenUnix("unix", addr)
	if errors.Is(err, syscall.EADDRINUSE) && !abstract(path) {
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

// dupConn returns a close-on-exec dup of c's fd; the caller owns it.
func dupConn(c syscall.Conn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, serr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, serr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if serr != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", serr)
	}
	return fd, nil
}

func closeObtained(o *obtained) {
	switch {
	case o == nil:
	case o.ln != nil:
		o.ln.Close()
	case o.pc != nil:
		o.pc.Close()
	}
}
