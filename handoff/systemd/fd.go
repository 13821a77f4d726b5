package systemd

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
	"golang.org/x/sys/unix"
)

// check verifies that p.f holds fd want and that the fd is open and a
// socket, sets FD_CLOEXEC (activation.Files sets it too, but drops the error
// that says the fd is missing) and reads what kind of socket it is.
func (p *passed) check(want int) error {
	p.fd = want
	fail := func(kind, err error) error {
		return &FDError{Op: "activate", FD: p.fd, Name: p.name, Kind: kind, Err: err}
	}
	rc, err := p.f.SyscallConn()
	if err != nil {
		return fail(ErrFDMissing, err)
	}
	got := -1
	if err := rc.Control(func(fd uintptr) { got = int(fd) }); err != nil {
		return fail(ErrFDMissing, err)
	}
	if got != want {
		p.fd = got
		return fail(ErrFDMissing, fmt.Errorf("activation.Files returned fd %d in place of fd %d", got, want))
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
	if p.name == ticket.FDName { // the session-ticket keys, from the fd store
		if err := ticket.Check(p.f); err != nil {
			return fail(ErrTickets, err)
		}
		p.tickets = true
		return nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fail(ErrNotSocket, fmt.Errorf("file type %s", linux.FileType(st.Mode)))
	}
	s, err := reuseport.ReadFD(p.fd)
	if err != nil {
		return fail(ErrNotSocket, err)
	}
	p.sock = *s
	return nil
}

// matches returns nil when the socket is of network's kind and bound to
// address, or why not.
func (p passed) matches(network, address string) error {
	if p.tickets {
		return fmt.Errorf("%s is a memfd, not a socket", ticket.FDName)
	}
	s := &p.sock
	if network != "" {
		have := s.Network()
		ok := have == network || (network == "tcp" || network == "udp") && have[:len(have)-1] == network
		if !ok {
			return fmt.Errorf("socket is %s, want %s", s, network)
		}
		if (s.Type == unix.SOCK_STREAM || s.Type == unix.SOCK_SEQPACKET) && !s.Listening {
			return fmt.Errorf("socket %s is not listening", s)
		}
	}
	if address == "" {
		return nil
	}
	if ok, err := sameAddr(s, address); err != nil || !ok {
		if err == nil {
			err = fmt.Errorf("socket is bound to %s, want %s", s.Address(), address)
		}
		return err
	}
	return nil
}

// sameAddr compares the socket's local address with a literal address.
func sameAddr(s *reuseport.Socket, address string) (bool, error) {
	if s.Family == unix.AF_UNIX {
		return s.Path == address, nil
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return false, fmt.Errorf("address %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return false, fmt.Errorf("address %q: port: %w", address, err)
	}
	have := s.Addr
	if have.Port() != uint16(port) {
		return false, nil
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

// isSocket reports whether fd is a socket (a stored memfd of session-ticket
// keys is not: package shared marks only sockets).
func isSocket(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}
