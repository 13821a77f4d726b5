package steer

import (
	"errors"
	"fmt"
	"github.com/zerodrop/zerodrop/internal/linux"
	"net/netip"
	"os"
	"strconv"
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

// inspect reads the address and cookie of a listening socket and refuses
// what the program cannot steer: non-TCP sockets and MPTCP listeners.
func inspect(c syscall.Conn) (sockInfo, error) {
	var si sockInfo
	err := linux.Control(c, func(fd int) error {
		proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
		if err != nil {
			return os.NewSyscallError("getsockopt SO_PROTOCOL", err)
		}
		sa, err := unix.Getsockname(fd)
		if err != nil {
			return os.NewSyscallError("getsockname", err)
		}
		si.addr = addrPort(sa)
		switch proto {
		case unix.IPPROTO_TCP:
		case unix.IPPROTO_MPTCP:
			return fmt.Errorf("%w: an MPTCP listener cannot run a reuseport program (the kernel says %w); listen with reuseport.Config{MPTCP: false}", reuseport.ErrNotSupported, unix.EOPNOTSUPP)
		default:
			return fmt.Errorf("%w: socket protocol %d, want IPPROTO_TCP", reuseport.ErrNotSupported, proto)
		}
		listening, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if err != nil {
			return os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
		}
		if listening == 0 {
			return fmt.Errorf("socket on %s is not listening: %w", si.addr, unix.EINVAL)
		}
		si.cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return os.NewSyscallError("getsockopt SO_COOKIE", err)
	})
	if err != nil {
		return si, err
	}
	d, err := reuseport.ReadDigest(c)
	if err != nil {
		return si, err
	}
	si.class = ClassOf(d)
	return si, nil
}

// cookieOf reads a socket's cookie.
func cookieOf(c syscall.Conn) (uint64, error) {
	var cookie uint64
	err := linux.Control(c, func(fd int) (err error) {
		cookie, err = unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_COOKIE)
		return os.NewSyscallError("getsockopt SO_COOKIE", err)
	})
	return cookie, err
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
func ClassOf(d reuseport.Digest) uint32 {
	s := d.Without("backlog").String() // "sha256:" and 16 hex digits
	v, _ := strconv.ParseUint(s[len(s)-8:], 16, 32)
	if v == 0 {
		v = 1 // 0 never names a class
	}
	return uint32(v)
}

func addrPort(sa unix.Sockaddr) netip.AddrPort {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port))
	}
	return netip.AddrPort{}
}
