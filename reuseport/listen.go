package reuseport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Listener is a TCP listener in a reuseport group. It is a *net.TCPListener
// (Accept, Close, File, SyscallConn all come from it, untouched) plus what the
// kernel says about its options.
type Listener struct {
	*net.TCPListener
	sock        *Socket
	adjustments []Adjustment
}

// PacketConn is a UDP socket in a reuseport group: a *net.UDPConn plus what the
// kernel says about its options.
type PacketConn struct {
	*net.UDPConn
	sock        *Socket
	adjustments []Adjustment
}

var (
	_ net.Listener   = (*Listener)(nil)
	_ syscall.Conn   = (*Listener)(nil)
	_ net.PacketConn = (*PacketConn)(nil)
	_ syscall.Conn   = (*PacketConn)(nil)
)

// Effective returns the options as the kernel reported them after listen.
func (l *Listener) Effective() Options { return l.sock.Effective }

// Digest returns the option digest read from the kernel after listen.
func (l *Listener) Digest() Digest { return l.sock.Digest }

// Socket returns what the kernel said of the socket after listen.
func (l *Listener) Socket() *Socket { return l.sock }

// Adjustments lists the options the kernel set to other values than asked.
func (l *Listener) Adjustments() []Adjustment { return l.adjustments }

// Queue reads the current accept queue (TCP_INFO).
func (l *Listener) Queue() (Queue, error) { return ReadQueue(l.TCPListener) }

// Effective returns the options as the kernel reported them after bind.
func (p *PacketConn) Effective() Options { return p.sock.Effective }

// Digest returns the option digest read from the kernel after bind.
func (p *PacketConn) Digest() Digest { return p.sock.Digest }

// Socket returns what the kernel said of the socket after bind.
func (p *PacketConn) Socket() *Socket { return p.sock }

// Adjustments lists the options the kernel set to other values than asked.
func (p *PacketConn) Adjustments() []Adjustment { return p.adjustments }

// Listen creates a TCP listener with SO_REUSEPORT and the default Config.
func Listen(ctx context.Context, network, address string) (*Listener, error) {
	var c Config
	return c.Listen(ctx, network, address)
}

// ListenPacket creates a UDP socket with SO_REUSEPORT and the default Config.
func ListenPacket(ctx context.Context, network, address string) (*PacketConn, error) {
	var c Config
	return c.ListenPacket(ctx, network, address)
}

// Listen creates a TCP listener ("tcp", "tcp4", "tcp6") in the reuseport group
// of address: socket(IPPROTO_TCP), every option of c.Options, a check that the
// group's owners have our socket's UID, bind, listen. Errors are *net.OpError
// wrapping a typed cause (UIDMismatchError, AddrInUseError, OptionError, ...);
// a negative count or duration in c.Options and an unknown c.Migration are an
// *OptionError wrapping os.ErrInvalid, and a ctx that has ended creates nothing
// and returns ctx.Err(), wrapped. The caller owns the returned listener. Linux 3.9+; 5.14+ for migration.
func (c *Config) Listen(ctx context.Context, network, address string) (*Listener, error) {
	e, fd, err := c.open(ctx, network, address, true)
	if err != nil {
		return nil, opError(network, address, e, err)
	}
	backlog := c.Options.Backlog
	if backlog == 0 {
		backlog = -1 // somaxconn
	}
	if err := unix.Listen(fd, backlog); err != nil {
		unix.Close(fd)
		return nil, opError(network, address, e, os.NewSyscallError("listen", err))
	}
	f := os.NewFile(uintptr(fd), "reuseport:"+e.ap.String())
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return nil, opError(network, address, e, err)
	}
	l := &Listener{TCPListener: ln.(*net.TCPListener)}
	if err := l.readBack(c, e); err != nil {
		l.Close()
		return nil, opError(network, address, e, err)
	}
	return l, nil
}

// ListenPacket creates a UDP socket ("udp", "udp4", "udp6") in the reuseport
// group of address. The caller owns it.
func (c *Config) ListenPacket(ctx context.Context, network, address string) (*PacketConn, error) {
	e, fd, err := c.open(ctx, network, address, false)
	if err != nil {
		return nil, opError(network, address, e, err)
	}
	f := os.NewFile(uintptr(fd), "reuseport:"+e.ap.String())
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		return nil, opError(network, address, e, err)
	}
	p := &PacketConn{UDPConn: pc.(*net.UDPConn)}
	if p.sock, err = ReadSocket(p.UDPConn); err != nil {
		p.Close()
		return nil, opError(network, address, e, err)
	}
	p.adjustments = adjustments(&c.Options, &p.sock.Effective, e)
	logAdjustments(c.logger(), e, p.adjustments)
	return p, nil
}

func (l *Listener) readBack(c *Config, e endpoint) (err error) {
	if l.sock, err = ReadSocket(l.TCPListener); err != nil {
		return err
	}
	l.adjustments = adjustments(&c.Options, &l.sock.Effective, e)
	logAdjustments(c.logger(), e, l.adjustments)
	return nil
}

// NewListener returns tl, a listening TCP socket made elsewhere (inherited
// from a predecessor, passed by systemd, made by net.Listen), as a Listener,
// so that Digest and Effective are there whatever the socket's origin; it
// has no Adjustments. s is what ReadSocket says of tl's socket, or nil to
// read it now. It takes ownership of tl on success; a socket that is not a
// listening inet stream socket gives an error wrapping ErrNotSupported and
// leaves tl to the caller.
func NewListener(tl *net.TCPListener, s *Socket) (*Listener, error) {
	if s == nil {
		var err error
		if s, err = ReadSocket(tl); err != nil {
			return nil, err
		}
	}
	if !s.inet() || s.Type != unix.SOCK_STREAM || !s.Listening {
		return nil, fmt.Errorf("%w: %s is not a listening TCP socket", ErrNotSupported, s)
	}
	return &Listener{TCPListener: tl, sock: s}, nil
}

// NewPacketConn is NewListener for a UDP socket.
func NewPacketConn(uc *net.UDPConn, s *Socket) (*PacketConn, error) {
	if s == nil {
		var err error
		if s, err = ReadSocket(uc); err != nil {
			return nil, err
		}
	}
	if !s.inet() || s.Type != unix.SOCK_DGRAM {
		return nil, fmt.Errorf("%w: %s is not a UDP socket", ErrNotSupported, s)
	}
	return &PacketConn{UDPConn: uc, sock: s}, nil
}

// open validates, checks migration, and returns a bound socket.
func (c *Config) open(ctx context.Context, network, address string, stream bool) (endpoint, int, error) {
	if err := ctx.Err(); err != nil {
		return endpoint{}, -1, err
	}
	if err := c.validate(); err != nil {
		return endpoint{}, -1, err
	}
	e, err := resolve(ctx, network, address)
	if err != nil {
		return e, -1, err
	}
	if e.kind.stream != stream {
		return e, -1, net.UnknownNetworkError(network)
	}
	if stream {
		if err := checkMigration(c.Migration, c.logger()); err != nil {
			return e, -1, err
		}
	}
	fd, err := c.socket(e)
	if err != nil {
		return e, -1, err
	}
	if err := c.bind(fd, e); err != nil {
		unix.Close(fd)
		return e, -1, err
	}
	return e, fd, nil
}

// validate refuses values the kernel would ignore or reject: negative
// counts and durations, and an unknown MigrationPolicy. Each error is an
// *OptionError wrapping os.ErrInvalid.
func (c *Config) validate() error {
	o := &c.Options
	invalid := func(option, value, why string) error {
		return &OptionError{Option: option, Value: value, Err: fmt.Errorf("%w: %s", os.ErrInvalid, why)}
	}
	for _, n := range []struct {
		option string
		v      int
	}{{"backlog", o.Backlog}, {"SO_RCVBUF", o.RecvBuffer}, {"SO_SNDBUF", o.SendBuffer}, {"TCP_KEEPCNT", o.KeepAlive.Count}} {
		if n.v < 0 {
			return invalid(n.option, strconv.Itoa(n.v), "must be 0 (the kernel's default) or positive")
		}
	}
	for _, d := range []struct {
		option string
		v      time.Duration
	}{{"TCP_DEFER_ACCEPT", o.DeferAccept}, {"TCP_USER_TIMEOUT", o.UserTimeout}, {"TCP_KEEPIDLE", o.KeepAlive.Idle}, {"TCP_KEEPINTVL", o.KeepAlive.Interval}} {
		if d.v < 0 {
			return invalid(d.option, d.v.String(), "must be 0 (off or the kernel's default) or positive")
		}
	}
	if c.Migration < MigrationWarn || c.Migration > MigrationIgnore {
		return invalid("migration", strconv.Itoa(int(c.Migration)), "not a MigrationPolicy")
	}
	return nil
}

// socket creates the socket and sets every option, before bind.
func (c *Config) socket(e endpoint) (int, error) {
	typ, proto := unix.SOCK_DGRAM, unix.IPPROTO_UDP
	if e.kind.stream {
		typ, proto = unix.SOCK_STREAM, unix.IPPROTO_TCP
		if c.MPTCP {
			proto = unix.IPPROTO_MPTCP
		}
	}
	fd, err := unix.Socket(e.kind.family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	o := c.Options
	o.V6Only = o.V6Only || e.v6only
	if err := setOptions(fd, e.kind, &o); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// bind checks the group's owners, binds, and explains EADDRINUSE.
func (c *Config) bind(fd int, e endpoint) error {
	if e.kind.stream && !c.SkipUIDCheck && e.ap.Port() != 0 {
		if err := checkUID(fd, e); err != nil {
			return err
		}
	}
	err := unix.Bind(fd, e.sockaddr())
	if err == nil {
		return nil
	}
	serr := os.NewSyscallError("bind", err)
	if errors.Is(err, unix.EADDRINUSE) && e.kind.stream {
		return diagnose(fd, e, serr)
	}
	return serr
}

// opError wraps err once in the *net.OpError of a listen on e, or on
// address as given when it did not parse.
func opError(network, address string, e endpoint, err error) error {
	switch {
	case e.ap.IsValid() && e.kind.stream:
		return neterr.Op("listen", network, net.TCPAddrFromAddrPort(e.ap), err)
	case e.ap.IsValid():
		return neterr.Op("listen", network, net.UDPAddrFromAddrPort(e.ap), err)
	}
	return neterr.OpText("listen", network, address, err)
}

func logAdjustments(log *zap.Logger, e endpoint, adj []Adjustment) {
	for _, a := range adj {
		log.Info("kernel adjusted a socket option", zap.String("addr", e.ap.String()),
			zap.String("option", a.Option), zap.String("asked", a.Asked), zap.String("got", a.Got), zap.String("why", a.Why))
	}
}
