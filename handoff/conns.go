package handoff

import (
	"net/netip"
	"strconv"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// kindTCPConn is a connected TCP socket: an idle keep-alive connection
// passed to the successor (not offered yet: the protocol version that
// carries connections is still to come).
const kindTCPConn = "tcp-conn"

// connDecl is one connected socket as its sender declares it: Address is
// the local address, Peer the remote one, Unread the bytes the sender read
// from it but did not consume, which precede what the socket holds.
type connDecl struct {
	socketInfo
	Peer   string
	Unread []byte
}

// validateConn checks a received fd against its declaration: a socket of the
// declared family, a TCP stream that is not listening, established (or in
// CLOSE_WAIT: the client closed during the transfer; what it sent is still
// to be read), bound to the declared local address and connected to the
// declared peer. Each failure is a *ValidationError.
func validateConn(fd int, d *connDecl) error {
	if _, err := validateKind(fd, &d.socketInfo); err != nil {
		return err
	}
	bad := func(check, want, got string, err error) error {
		return &ValidationError{Name: d.Name, Check: check, Want: want, Got: got, Err: err}
	}
	ti, err := linux.TCPInfo(fd)
	if err != nil {
		return bad("TCP_INFO", "established", "?", err)
	}
	if ti.State != unix.BPF_TCP_ESTABLISHED && ti.State != unix.BPF_TCP_CLOSE_WAIT {
		return bad("TCP_INFO", "established", "state "+strconv.Itoa(int(ti.State)), nil)
	}
	for _, c := range []struct {
		check, want string
		get         func(int) (string, error)
	}{{"getsockname", d.Address, linux.Sockname}, {"getpeername", d.Peer, linux.Peername}} {
		got, err := c.get(fd)
		if err != nil {
			return bad(c.check, c.want, "?", err)
		}
		if !exactAddr(c.want, got) {
			return bad(c.check, c.want, got, nil)
		}
	}
	return nil
}

// exactAddr compares two literal addresses, ports included: a connection's
// addresses have no wildcard.
func exactAddr(want, got string) bool {
	w, err1 := netip.ParseAddrPort(want)
	g, err2 := netip.ParseAddrPort(got)
	return err1 == nil && err2 == nil && w.Port() != 0 && w.Addr().Unmap() == g.Addr().Unmap() && w.Port() == g.Port()
}
