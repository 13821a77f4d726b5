package reuseport

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// overlaps reports whether a listener on b conflicts with binding a: the same
// address, or either one a wildcard of a family that covers the other.
func overlaps(a, b netip.AddrPort) bool {
	x, y := a.Addr().Unmap(), b.Addr().Unmap()
	return x == y || (x.IsUnspecified() && (x.Is6() || y.Is4())) || (y.IsUnspecified() && (y.Is6() || x.Is4()))
}

// socketUID is the owner the kernel compares: the socket inode's UID.
func socketUID(fd int) (uint32, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, os.NewSyscallError("fstat", err)
	}
	return st.Uid, nil
}

// checkUID fails with a UIDMismatchError when a listener that would conflict
// with our bind belongs to another UID. It does not bind. When the kernel
// cannot be asked (sock_diag refused), it lets the bind speak.
func checkUID(fd int, e endpoint) error {
	ours, err := socketUID(fd)
	if err != nil {
		return err
	}
	// The members first; the holder scan only to name a mismatch's PIDs.
	g, err := inspectOne(context.Background(), e.ap, func(a netip.AddrPort) bool { return overlaps(e.ap, a) }, false)
	if err != nil {
		return nil
	}
	var theirs []uint32
	for _, m := range g.Members {
		if m.UID != ours && !slices.Contains(theirs, m.UID) {
			theirs = append(theirs, m.UID)
		}
	}
	if theirs == nil {
		return nil
	}
	if err := scanHolders(context.Background(), []*Group{g}); err != nil {
		g.Note = "could not find the processes holding them: " + err.Error()
	}
	return &UIDMismatchError{Addr: e.ap.String(), Ours: ours, Theirs: theirs, PIDs: g.PIDs(), Note: g.Note}
}

// diagnose explains an EADDRINUSE from bind, using what the kernel shows: the
// listeners on the port, and a bind-only SO_REUSEPORT probe on each one's
// address (which succeeds only if that group is joinable, and never listens).
func diagnose(fd int, e endpoint, bindErr error) error {
	g, err := inspectOne(context.Background(), e.ap, func(a netip.AddrPort) bool { return overlaps(e.ap, a) }, true)
	if err != nil {
		return &AddrInUseError{Addr: e.ap.String(), Err: errors.Join(bindErr, err)}
	}
	ours, _ := socketUID(fd)
	var theirs []uint32
	for _, m := range g.Members {
		if m.UID != ours && !slices.Contains(theirs, m.UID) {
			theirs = append(theirs, m.UID)
		}
	}
	if theirs != nil {
		return &UIDMismatchError{Addr: e.ap.String(), Ours: ours, Theirs: theirs, PIDs: g.PIDs(), Note: g.Note}
	}
	out := &AddrInUseError{Addr: e.ap.String(), Holders: g.Members, Err: bindErr}
	for _, m := range g.Members {
		if !probe(m.Addr) {
			out.Cause, out.Holders = ErrNotReusable, []Member{m}
			return out
		}
	}
	if len(g.Members) > 0 && !slices.ContainsFunc(g.Members, func(m Member) bool { return m.Addr.Addr().Unmap() == e.ap.Addr().Unmap() }) {
		out.Cause = ErrAddrOverlap
	}
	return out
}

// probe binds a SO_REUSEPORT socket to ap without listening and closes it: it
// succeeds only if the listener there has SO_REUSEPORT and our UID.
func probe(ap netip.AddrPort) bool {
	family := unix.AF_INET6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
	if ap.Addr().Is4() {
		family = unix.AF_INET
		sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if family == unix.AF_INET6 {
		unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		return false
	}
	return unix.Bind(fd, sa) == nil
}
