package handoff

import (
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/sockets"
	"golang.org/x/sys/unix"
)

// validate checks a received fd against what the offer declared: the checks
// of validateKind, then, for inet sockets, the declared options (sets holds
// the option values of an offer that carried them; without, the declared
// digest is the version 1 hash). reuseport reads the socket once.
func validate(fd int, s *socketInfo, sets map[string]map[string]string) (*reuseport.Socket, error) {
	so, err := validateKind(fd, s)
	if err != nil || s.Kind == kindUnix {
		return so, err
	}
	if err := checkDeclared(so, s, sets); err != nil {
		return nil, err
	}
	return so, nil
}

// validateKind checks that fd is a socket of the declared domain, type and
// protocol, listening if a listener (not listening if a connection), bound
// to the declared address, and returns what reuseport read of it.
func validateKind(fd int, s *socketInfo) (*reuseport.Socket, error) {
	bad := func(check, want, got string, err error) error {
		return &ValidationError{Name: s.Name, Check: check, Want: want, Got: got, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, bad("fstat", "socket", "?", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, bad("S_IFSOCK", "socket", "file mode "+strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8), nil)
	}
	so, err := reuseport.ReadFD(fd)
	if err != nil {
		return nil, bad("getsockopt", s.Kind, "?", err)
	}
	if !domainOK(s.Network, so.Family) {
		return nil, bad("SO_DOMAIN", s.Network, strconv.Itoa(so.Family), nil)
	}
	if want := sockType(s.Kind); so.Type != want {
		return nil, bad("SO_TYPE", strconv.Itoa(want), strconv.Itoa(so.Type), nil)
	}
	if !protoOK(s.Kind, so.Protocol) {
		return nil, bad("SO_PROTOCOL", s.Kind, strconv.Itoa(so.Protocol), nil)
	}
	if want := s.Kind != kindTCPConn; s.Kind != kindUDP && so.Listening != want {
		return nil, bad("SO_ACCEPTCONN", strconv.Itoa(boolInt(want)), strconv.Itoa(boolInt(so.Listening)), nil)
	}
	if got := so.Address(); !sockets.SameAddr(s.Address, got) {
		return nil, bad("getsockname", s.Address, got, nil)
	}
	return so, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkDeclared compares an inet socket's options with the declared ones:
// the option values of the offer's set named by the socket's digest, or,
// from a predecessor that sent no values, the version 1 digest hash.
func checkDeclared(so *reuseport.Socket, s *socketInfo, sets map[string]map[string]string) error {
	if sets == nil {
		if s.Digest != so.Digest.LegacyString() && s.Digest != so.Digest.String() {
			return &ValidationError{Name: s.Name, Check: "digest", Want: s.Digest, Got: so.Digest.LegacyString()}
		}
		return nil
	}
	set, ok := sets[s.Digest]
	if !ok {
		return &ValidationError{Name: s.Name, Check: "digest", Want: s.Digest, Got: "no option values for it in the offer"}
	}
	if err := so.Digest.CompareDeclared(set); err != nil {
		return &ValidationError{Name: s.Name, Check: "options", Want: "the declared values", Got: "others", Err: err}
	}
	return nil
}

func domainOK(network string, dom int) bool {
	switch network[len(network)-1] {
	case '4':
		return dom == unix.AF_INET
	case '6':
		return dom == unix.AF_INET6
	case 'x': // unix
		return dom == unix.AF_UNIX
	}
	return dom == unix.AF_INET || dom == unix.AF_INET6
}

func protoOK(kind string, proto int) bool {
	switch kind {
	case kindTCP, kindTCPConn:
		return proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_MPTCP
	case kindUDP:
		return proto == unix.IPPROTO_UDP
	}
	return proto == 0
}

// sockType is the socket type of a kind.
func sockType(kind string) int {
	if kind == kindUDP {
		return unix.SOCK_DGRAM
	}
	return unix.SOCK_STREAM
}

// validateConn checks a received fd against its declaration: a socket, of
// TCP (TCP_INFO answers only for TCP), established (or in CLOSE_WAIT: the
// client closed during the transfer; what it sent is still to be read), of
// the declared family, bound to the declared local address and connected
// to the declared peer; it returns the socket's inode. Each failure is a
// *ValidationError. It costs five syscalls, not the forty of a listener's
// full read (reuseport.ReadFD): a handoff may pass tens of thousands of
// connections.
func validateConn(fd int, d *connDecl) (ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, &ValidationError{Name: d.Name, Check: "fstat", Want: "socket", Got: "?", Err: os.NewSyscallError("fstat", err)}
	}
	return st.Ino, checkConn(fd, d, &st)
}

// checkConn is validateConn's checks of fd, whose fstat is st.
func checkConn(fd int, d *connDecl, st *unix.Stat_t) error {
	bad := func(check, want, got string, err error) error {
		return &ValidationError{Name: d.Name, Check: check, Want: want, Got: got, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return bad("S_IFSOCK", "socket", "file mode "+strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8), nil)
	}
	ti, err := linux.TCPInfo(fd)
	if err != nil {
		return bad("TCP_INFO", "a TCP connection", "?", err)
	}
	if ti.State != unix.BPF_TCP_ESTABLISHED && ti.State != unix.BPF_TCP_CLOSE_WAIT {
		return bad("TCP_INFO", "established", "state "+strconv.Itoa(int(ti.State)), nil)
	}
	local, err := linux.Sockname(fd)
	if err != nil {
		return bad("getsockname", d.Address, "?", err)
	}
	if got := connNetwork(local); d.Network != "tcp" && d.Network != got {
		return bad("family", d.Network, got, nil)
	}
	if !exactAddr(d.Address, local) {
		return bad("getsockname", d.Address, local, nil)
	}
	peer, err := linux.Peername(fd)
	if err != nil {
		return bad("getpeername", d.Peer, "?", err)
	}
	if !exactAddr(d.Peer, peer) {
		return bad("getpeername", d.Peer, peer, nil)
	}
	return nil
}

// declareConn declares the connected socket fd as the listener name's,
// with state: its family and addresses as the kernel has them (an IPv4
// client of a dual-stack listener is an AF_INET6 socket with a mapped
// address, declared tcp6).
func declareConn(fd int, name string, state []byte) (connDecl, error) {
	local, err := linux.Sockname(fd)
	if err != nil {
		return connDecl{}, err
	}
	peer, err := linux.Peername(fd)
	if err != nil {
		return connDecl{}, err
	}
	return connDecl{socketInfo: socketInfo{Name: name, Kind: kindTCPConn, Network: connNetwork(local), Address: local}, Peer: peer, State: state}, nil
}

// connNetwork is "tcp6" for an address linux.Sockname formatted from an
// AF_INET6 socket ("[ip]:port"), else "tcp4".
func connNetwork(addr string) string {
	if strings.HasPrefix(addr, "[") {
		return "tcp6"
	}
	return "tcp4"
}

// exactAddr compares two literal addresses, ports included: a connection's
// addresses have no wildcard.
func exactAddr(want, got string) bool {
	w, err1 := netip.ParseAddrPort(want)
	g, err2 := netip.ParseAddrPort(got)
	return err1 == nil && err2 == nil && w.Port() != 0 && w.Addr().Unmap() == g.Addr().Unmap() && w.Port() == g.Port()
}
