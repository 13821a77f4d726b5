package steer

import (
	"errors"
	"fmt"
	"github.com/zerodrop/zerodrop/internal/linux"
	"net/netip"
	"os"
	"syscall"

	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// sockInfo is what Join needs to know about a listener.
type sockInfo struct {
	addr   netip.AddrPort
	cookie uint64
	class  uint32
}

// inspect reads the address, cookie and option class of a listening socket
// (through reuseport, which reads it once) and refuses what the program
// cannot steer: non-TCP sockets and MPTCP listeners.
func inspect(c syscall.Conn) (sockInfo, error) {
	s, err := reuseport.ReadSocket(c)
	if err != nil {
		return sockInfo{}, err
	}
	si := sockInfo{addr: s.Addr, cookie: s.Cookie, class: s.Digest.Class()}
	switch {
	case s.Type != unix.SOCK_STREAM:
		return si, fmt.Errorf("%w: %s socket, want a TCP listener", reuseport.ErrNotSupported, s.Network())
	case s.Protocol == unix.IPPROTO_MPTCP:
		return si, fmt.Errorf("%w: an MPTCP listener cannot run a reuseport program (the kernel says %w); listen with reuseport.Config{MPTCP: false}", reuseport.ErrNotSupported, unix.EOPNOTSUPP)
	case s.Protocol != unix.IPPROTO_TCP:
		return si, fmt.Errorf("%w: socket protocol %d, want IPPROTO_TCP", reuseport.ErrNotSupported, s.Protocol)
	case !s.Listening:
		return si, fmt.Errorf("socket on %s is not listening: %w", si.addr, unix.EINVAL)
	}
	return si, nil
}

// cookieOf reads a socket's cookie.
func cookieOf(c syscall.Conn) (uint64, error) {
	s, err := reuseport.ReadSocket(c)
	if err != nil {
		return 0, err
	}
	return s.Cookie, nil
}

// attach attaches the program to the socket's reuseport group.
func attach(c syscall.Conn, progFD int) error {
	return linux.Control(c, func(fd int) error {
		err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, progFD)
		if errors.Is(err, unix.EOPNOTSUPP) {
			return fmt.Errorf("%w: %w", reuseport.ErrNotSupported, os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_EBPF", err))
		}
		return os.NewSyscallError("setsockopt SO_ATTACH_REUSEPORT_EBPF", err)
	})
}

// ClassOf returns the option class of a digest: a small integer, equal for two
// listeners whose options (other than the backlog) are equal. The program
// migrates a connection only to a listener of its own listener's class.
func ClassOf(d reuseport.Digest) uint32 { return d.Class() }
