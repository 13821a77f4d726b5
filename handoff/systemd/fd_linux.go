package systemd

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// sockInfo is what the kernel says a passed socket is.
type sockInfo struct {
	domain, typ, proto int
	listening          bool
	local              unix.Sockaddr
}

// check verifies that the fd is open and a socket, sets FD_CLOEXEC and reads
// what kind of socket it is.
func (p *passed) check() error {
	fail := func(kind, err error) error {
		return &FDError{Op: "activate", FD: p.fd, Name: p.name, Kind: kind, Err: err}
	}
	flags, err := unix.FcntlInt(uintptr(p.fd), unix.F_GETFD, 0)
	if err != nil {
		return fail(ErrFDMissing, os.NewSyscallError("fcntl F_GETFD", err))
	}
	if _, err := unix.FcntlInt(uintptr(p.fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
		return fail(ErrFDMissing, os.NewSyscallError("fcntl F_SETFD", err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(p.fd, &st); err != nil {
		return fail(ErrFDMissing, os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fail(ErrNotSocket, fmt.Errorf("file type %s", linux.FileType(st.Mode)))
	}
	s, err := readSock(p.fd)
	if err != nil {
		return fail(ErrNotSocket, err)
	}
	p.sock = s
	return nil
}

func readSock(fd int) (sockInfo, error) {
	var s sockInfo
	for _, o := range []struct {
		name string
		opt  int
		dst  *int
	}{{"SO_DOMAIN", unix.SO_DOMAIN, &s.domain}, {"SO_TYPE", unix.SO_TYPE, &s.typ}, {"SO_PROTOCOL", unix.SO_PROTOCOL, &s.proto}} {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, o.opt)
		if err != nil {
			return s, os.NewSyscallError("getsockopt "+o.name, err)
		}
		*o.dst = v
	}
	acc, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return s, os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
	}
	s.listening = acc == 1
	if s.local, err = unix.Getsockname(fd); err != nil {
		return s, os.NewSyscallError("getsockname", err)
	}
	return s, nil
}

func closeFD(fd int) error {
	if err := unix.Close(fd); err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// network returns the Go network name of the socket ("tcp4", "unixgram", ...).
func (s sockInfo) network() string {
	switch {
	case s.domain == unix.AF_UNIX && s.typ == unix.SOCK_STREAM:
		return "unix"
	case s.domain == unix.AF_UNIX && s.typ == unix.SOCK_SEQPACKET:
		return "unixpacket"
	case s.domain == unix.AF_UNIX && s.typ == unix.SOCK_DGRAM:
		return "unixgram"
	}
	var n string
	switch {
	case s.typ == unix.SOCK_STREAM && (s.proto == unix.IPPROTO_TCP || s.proto == unix.IPPROTO_MPTCP):
		n = "tcp"
	case s.typ == unix.SOCK_DGRAM && s.proto == unix.IPPROTO_UDP:
		n = "udp"
	default:
		return fmt.Sprintf("domain %d type %d protocol %d", s.domain, s.typ, s.proto)
	}
	if s.domain == unix.AF_INET {
		return n + "4"
	}
	return n + "6"
}

// address returns the local address as "ip:port" or the unix path.
func (s sockInfo) address() string {
	switch a := s.local.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrUnix:
		return a.Name
	}
	return ""
}

func (s sockInfo) String() string {
	state := ""
	if s.typ != unix.SOCK_DGRAM && !s.listening {
		state = " (not listening)"
	}
	return s.network() + ":" + s.address() + state
}

// matches returns nil when the socket is of network's kind and bound to
// address, or why not.
func (p passed) matches(network, address string) error {
	s := p.sock
	if network != "" {
		have := s.network()
		ok := have == network || (network == "tcp" || network == "udp") && have[:len(have)-1] == network
		if !ok {
			return fmt.Errorf("socket is %s, want %s", s, network)
		}
		if (s.typ == unix.SOCK_STREAM || s.typ == unix.SOCK_SEQPACKET) && !s.listening {
			return fmt.Errorf("socket %s is not listening", s)
		}
	}
	if address == "" {
		return nil
	}
	if ok, err := sameAddr(s, address); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("socket is bound to %s, want %s", s.address(), address)
		}
		return err
	}
	return nil
}

// sameAddr compares the socket's local address with a literal address.
func sameAddr(s sockInfo, address string) (bool, error) {
	if s.domain == unix.AF_UNIX {
		return s.address() == address, nil
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return false, fmt.Errorf("address %q: port: %w", address, err)
	}
	have, err := netip.ParseAddrPort(s.address())
	if err != nil || have.Port() != uint16(port) {
		return false, err
	}
	if host == "" {
		return have.Addr().IsUnspecified(), nil
	}
	want, err := netip.ParseAddr(host)
	if err != nil {
		return false, fmt.Errorf("address %q: host must be an IP literal: %w", address, err)
	}
	if want.IsUnspecified() { // 0.0.0.0 or ::, either family's wildcard
		return have.Addr().IsUnspecified(), nil
	}
	return want.Unmap() == have.Addr().Unmap(), nil
}
