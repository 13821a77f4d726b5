package linux

import (
	"bytes"
	"net/netip"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The calls below are the x/sys/unix ones made without telling the scheduler
// (RawSyscall): none of them can block, and validating a thousand inherited
// sockets makes some 30 000 of them. On a VM with page-table isolation a
// scheduler-aware call costs half as much again when two threads make them,
// because the runtime's monitor then wakes every 20 us.

func getsockopt(fd, level, opt int, p unsafe.Pointer, n *uint32) error {
	_, _, e := unix.RawSyscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), uintptr(opt), uintptr(p), uintptr(unsafe.Pointer(n)), 0)
	if e != 0 {
		return e
	}
	return nil
}

// GetsockoptInt reads an int socket option, as unix.GetsockoptInt does.
func GetsockoptInt(fd, level, opt int) (int, error) {
	var v int32
	n := uint32(unsafe.Sizeof(v))
	if err := getsockopt(fd, level, opt, unsafe.Pointer(&v), &n); err != nil {
		return 0, err
	}
	return int(v), nil
}

// GetsockoptUint64 reads a 64-bit socket option (SO_COOKIE), as
// unix.GetsockoptUint64 does.
func GetsockoptUint64(fd, level, opt int) (uint64, error) {
	var v uint64
	n := uint32(unsafe.Sizeof(v))
	if err := getsockopt(fd, level, opt, unsafe.Pointer(&v), &n); err != nil {
		return 0, err
	}
	return v, nil
}

// GetsockoptString reads a string socket option (up to 256 bytes), as
// unix.GetsockoptString does: the value ends at the first NUL.
func GetsockoptString(fd, level, opt int) (string, error) {
	var buf [256]byte
	n := uint32(len(buf))
	if err := getsockopt(fd, level, opt, unsafe.Pointer(&buf[0]), &n); err != nil {
		return "", err
	}
	b := buf[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}

// TCPInfo reads TCP_INFO, as unix.GetsockoptTCPInfo does.
func TCPInfo(fd int) (*unix.TCPInfo, error) {
	var info unix.TCPInfo
	n := uint32(unsafe.Sizeof(info))
	if err := getsockopt(fd, unix.IPPROTO_TCP, unix.TCP_INFO, unsafe.Pointer(&info), &n); err != nil {
		return nil, err
	}
	return &info, nil
}

// Sockname returns the address an inet socket is bound to as a literal
// "ip:port" ("[ip]:port" for IPv6, without zone); for other families it
// returns the path unix.Getsockname reports ("@" for an abstract name).
func Sockname(fd int) (string, error) {
	return sockaddr(fd, unix.SYS_GETSOCKNAME, "getsockname")
}

// Peername returns the address a connected socket is connected to, in the
// form Sockname uses.
func Peername(fd int) (string, error) {
	return sockaddr(fd, unix.SYS_GETPEERNAME, "getpeername")
}

// sockaddr runs getsockname or getpeername (trap) and formats the address.
func sockaddr(fd int, trap uintptr, op string) (string, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unsafe.Sizeof(rsa))
	_, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return "", os.NewSyscallError(op, e)
	}
	switch rsa.Addr.Family {
	case unix.AF_INET:
		p := (*unix.RawSockaddrInet4)(unsafe.Pointer(&rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port(&p.Port)).String(), nil
	case unix.AF_INET6:
		p := (*unix.RawSockaddrInet6)(unsafe.Pointer(&rsa))
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr), port(&p.Port)).String(), nil
	}
	var sa unix.Sockaddr
	var err error
	if trap == unix.SYS_GETPEERNAME {
		sa, err = unix.Getpeername(fd)
	} else {
		sa, err = unix.Getsockname(fd)
	}
	if err != nil {
		return "", os.NewSyscallError(op, err)
	}
	if u, ok := sa.(*unix.SockaddrUnix); ok {
		return u.Name, nil
	}
	return "?", nil
}

// port reads a port in network byte order.
func port(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// DupCloexec duplicates fd with close-on-exec set (fcntl F_DUPFD_CLOEXEC).
func DupCloexec(fd int) (int, error) {
	nfd, _, e := unix.RawSyscall(unix.SYS_FCNTL, uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", e)
	}
	return int(nfd), nil
}
