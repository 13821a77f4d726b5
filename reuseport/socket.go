package reuseport

import (
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// Socket is what the kernel says a socket is, read from its fd once: the
// only place in zerodrop that asks a socket what it is. handoff, systemd,
// steer, drain and the doctor all read sockets through ReadSocket or ReadFD.
type Socket struct {
	Family    int  // SO_DOMAIN: unix.AF_INET, AF_INET6, AF_UNIX, ...
	Type      int  // SO_TYPE: unix.SOCK_STREAM, SOCK_DGRAM, ...
	Protocol  int  // SO_PROTOCOL: IPPROTO_TCP, IPPROTO_MPTCP, IPPROTO_UDP, 0
	Listening bool // SO_ACCEPTCONN (TCP_INFO's state for TCP)
	// Addr is the bound address of an inet socket (getsockname); Path the
	// bound name of a unix socket ("@name" for an abstract one).
	Addr netip.AddrPort
	Path string
	// Cookie is SO_COOKIE, the kernel's id of the socket (0 for unix sockets).
	Cookie uint64
	// Digest and Effective are the options of an inet socket, read back from
	// the kernel (zero for other families).
	Digest    Digest
	Effective Options
}

// ReadSocket reads what the kernel says of the socket c. It does not take
// ownership of c. A descriptor that is not a socket gives ENOTSOCK.
func ReadSocket(c syscall.Conn) (*Socket, error) {
	var s *Socket
	err := linux.Control(c, func(fd int) (err error) {
		s, err = ReadFD(fd)
		return err
	})
	return s, err
}

// ReadFD is ReadSocket for a bare fd; it neither duplicates nor closes it.
func ReadFD(fd int) (*Socket, error) {
	s := &Socket{}
	if err := s.readIdentity(fd); err != nil {
		return nil, err
	}
	if s.inet() {
		if err := s.readInet(fd); err != nil {
			return nil, err
		}
		return s, nil
	}
	if s.Family == unix.AF_UNIX && s.Type != unix.SOCK_DGRAM {
		acc, err := linux.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if err != nil {
			return nil, os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
		}
		s.Listening = acc == 1
	}
	name, err := linux.Sockname(fd)
	if err != nil {
		return nil, err
	}
	s.Path = name
	return s, nil
}

// readIdentity reads SO_DOMAIN, SO_TYPE and SO_PROTOCOL.
func (s *Socket) readIdentity(fd int) error {
	for _, o := range [...]struct {
		name string
		opt  int
		dst  *int
	}{{"SO_DOMAIN", unix.SO_DOMAIN, &s.Family}, {"SO_TYPE", unix.SO_TYPE, &s.Type}, {"SO_PROTOCOL", unix.SO_PROTOCOL, &s.Protocol}} {
		v, err := linux.GetsockoptInt(fd, unix.SOL_SOCKET, o.opt)
		if err != nil {
			return os.NewSyscallError("getsockopt "+o.name, err)
		}
		*o.dst = v
	}
	return nil
}

func (s *Socket) inet() bool { return s.Family == unix.AF_INET || s.Family == unix.AF_INET6 }

func (s *Socket) kind() kind { return kind{family: s.Family, stream: s.Type == unix.SOCK_STREAM} }

// readInet reads the options, the address and the cookie of an inet socket.
func (s *Socket) readInet(fd int) error {
	d, eff, err := readOptions(fd, s)
	if err != nil {
		return err
	}
	s.Digest, s.Effective = d, eff
	s.Listening = d.listening
	addr, err := linux.Sockname(fd)
	if err != nil {
		return err
	}
	if s.Addr, err = netip.ParseAddrPort(addr); err != nil {
		return fmt.Errorf("getsockname %q: %w", addr, err)
	}
	s.Cookie, err = linux.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		return os.NewSyscallError("getsockopt SO_COOKIE", err)
	}
	return nil
}

// Network returns the Go network name of the socket: "tcp4", "tcp6",
// "udp4", "udp6", "unix", "unixgram", "unixpacket", or a description of a
// kind package net has no name for.
func (s *Socket) Network() string {
	switch {
	case s.Family == unix.AF_UNIX && s.Type == unix.SOCK_STREAM:
		return "unix"
	case s.Family == unix.AF_UNIX && s.Type == unix.SOCK_SEQPACKET:
		return "unixpacket"
	case s.Family == unix.AF_UNIX && s.Type == unix.SOCK_DGRAM:
		return "unixgram"
	}
	var n string
	switch {
	case s.inet() && s.Type == unix.SOCK_STREAM && (s.Protocol == unix.IPPROTO_TCP || s.Protocol == unix.IPPROTO_MPTCP):
		n = "tcp"
	case s.inet() && s.Type == unix.SOCK_DGRAM && s.Protocol == unix.IPPROTO_UDP:
		n = "udp"
	default:
		return fmt.Sprintf("domain %d type %d protocol %d", s.Family, s.Type, s.Protocol)
	}
	if s.Family == unix.AF_INET {
		return n + "4"
	}
	return n + "6"
}

// Address returns the bound address: "ip:port" for inet sockets, the path
// (or "@name") for unix sockets.
func (s *Socket) Address() string {
	if s.inet() {
		return s.Addr.String()
	}
	return s.Path
}

// String describes the socket, as "tcp4:127.0.0.1:8080" or
// "unix:/run/x.sock (not listening)".
func (s *Socket) String() string {
	state := ""
	if s.Type != unix.SOCK_DGRAM && !s.Listening {
		state = " (not listening)"
	}
	return s.Network() + ":" + s.Address() + state
}
