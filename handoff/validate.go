package handoff

import (
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// rawFD lets reuseport read a bare fd; it never closes it.
type rawFD int

func (r rawFD) SyscallConn() (syscall.RawConn, error) { return r, nil }
func (r rawFD) Control(f func(fd uintptr)) error      { f(uintptr(r)); return nil }
func (r rawFD) Read(f func(fd uintptr) bool) error    { f(uintptr(r)); return nil }
func (r rawFD) Write(f func(fd uintptr) bool) error   { f(uintptr(r)); return nil }

// validate checks a received fd against what the offer declared: a socket, of
// the declared domain, type and protocol, listening if a listener, bound to the
// declared address, with the declared option digest.
func validate(fd int, s *socketInfo) (*reuseport.Digest, error) {
	if err := validateKind(fd, s); err != nil {
		return nil, err
	}
	if s.Kind == kindUnix {
		return nil, nil
	}
	d, err := reuseport.ReadDigest(rawFD(fd))
	if err != nil || d.String() != s.Digest {
		return nil, &ValidationError{Name: s.Name, Check: "digest", Want: s.Digest, Got: d.String(), Err: err}
	}
	return &d, nil
}

// validateKind does every check of validate but the digest.
func validateKind(fd int, s *socketInfo) error {
	bad := func(check, want, got string, err error) error {
		return &ValidationError{Name: s.Name, Check: check, Want: want, Got: got, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return bad("fstat", "socket", "?", os.NewSyscallError("fstat", err))
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return bad("S_IFSOCK", "socket", "file mode "+strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8), nil)
	}
	get := func(opt int) (int, error) {
		v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		return v, os.NewSyscallError("getsockopt", err)
	}
	dom, err := get(unix.SO_DOMAIN)
	if err != nil || !domainOK(s.Network, dom) {
		return bad("SO_DOMAIN", s.Network, strconv.Itoa(dom), err)
	}
	typ, err := get(unix.SO_TYPE)
	wantTyp := unix.SOCK_STREAM
	if s.Kind == kindUDP {
		wantTyp = unix.SOCK_DGRAM
	}
	if err != nil || typ != wantTyp {
		return bad("SO_TYPE", strconv.Itoa(wantTyp), strconv.Itoa(typ), err)
	}
	proto, err := get(unix.SO_PROTOCOL)
	if err != nil || !protoOK(s.Kind, proto) {
		return bad("SO_PROTOCOL", s.Kind, strconv.Itoa(proto), err)
	}
	if s.Kind != kindUDP {
		acc, err := get(unix.SO_ACCEPTCONN)
		if err != nil || acc != 1 {
			return bad("SO_ACCEPTCONN", "1", strconv.Itoa(acc), err)
		}
	}
	return checkSockname(fd, s)
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
	case kindTCP:
		return proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_MPTCP
	case kindUDP:
		return proto == unix.IPPROTO_UDP
	}
	return proto == 0
}

// checkSockname compares getsockname with the declared address.
func checkSockname(fd int, s *socketInfo) error {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return &ValidationError{Name: s.Name, Check: "getsockname", Want: s.Address, Err: os.NewSyscallError("getsockname", err)}
	}
	got := sockaddrString(sa)
	if !sameAddr(s.Address, got) {
		return &ValidationError{Name: s.Name, Check: "getsockname", Want: s.Address, Got: got}
	}
	return nil
}

func sockaddrString(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrUnix:
		return a.Name
	}
	return "?"
}

// sameAddr compares two literal addresses; a port 0 in want matches any port.
func sameAddr(want, got string) bool {
	if want == got {
		return true
	}
	w, err1 := netip.ParseAddrPort(want)
	g, err2 := netip.ParseAddrPort(got)
	if err1 != nil || err2 != nil {
		return false
	}
	return w.Addr().Unmap() == g.Addr().Unmap() && (w.Port() == 0 || w.Port() == g.Port())
}

// wantAddr resolves what Listen was asked for into a literal "ip:port" to
// compare with an inherited socket; an empty host is the wildcard.
func wantAddr(network, address string) (string, bool) {
	if network == "unix" {
		return address, true
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", false
	}
	if host == "" {
		host = "::"
		if network[len(network)-1] == '4' {
			host = "0.0.0.0"
		}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", false
	}
	return netip.AddrPortFrom(ip, uint16(p)).String(), true
}

// checkOptions compares an inherited inet socket (its digest got) with what
// cfg would create: a probe socket of the same kind gets cfg's options (never
// bound), and the two digests must agree; the backlog is compared with cfg's,
// clamped to net.core.somaxconn. It returns a *reuseport.OptionMismatchError
// naming every option that differs. The probe's digest is cached per kind.
func (u *Upgrader) checkOptions(network string, fd int, got reuseport.Digest) error {
	dom, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	typ, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	key := network + "/" + strconv.Itoa(dom)
	u.mu.Lock()
	want, ok := u.wants[key]
	u.mu.Unlock()
	if !ok {
		var err error
		if want, err = probeDigest(&u.cfg.Listen, network, dom, typ); err != nil {
			return err
		}
		u.mu.Lock()
		u.wants[key] = want
		u.mu.Unlock()
	}
	mm := want.Without("backlog").Compare(got.Without("backlog"))
	if typ != unix.SOCK_STREAM {
		return mm
	}
	return addBacklog(mm, u.cfg.Listen.Options.Backlog, u.somaxconn(), got)
}

// probeDigest is the digest of an unbound socket with cfg's options.
func probeDigest(cfg *reuseport.Config, network string, dom, typ int) (reuseport.Digest, error) {
	proto := unix.IPPROTO_UDP
	if typ == unix.SOCK_STREAM {
		proto = unix.IPPROTO_TCP
		if cfg.MPTCP {
			proto = unix.IPPROTO_MPTCP
		}
	}
	p, err := unix.Socket(dom, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return reuseport.Digest{}, os.NewSyscallError("socket", err)
	}
	defer unix.Close(p)
	if err := cfg.Control(network, "", rawFD(p)); err != nil {
		return reuseport.Digest{}, err
	}
	return reuseport.ReadDigest(rawFD(p))
}

// somaxconn reads net.core.somaxconn once; 4096 if unreadable.
func (u *Upgrader) somaxconn() int {
	u.maxOnce.Do(func() {
		u.maxConn = 4096
		if s, err := linux.ReadSysctl("net.core.somaxconn"); err == nil {
			if n, err := strconv.Atoi(s); err == nil {
				u.maxConn = n
			}
		}
	})
	return u.maxConn
}

// addBacklog adds a backlog difference to mm, if any.
func addBacklog(mm error, asked, somaxconn int, got reuseport.Digest) error {
	if asked == 0 || asked > somaxconn {
		asked = somaxconn
	}
	gotB := ""
	for _, v := range got.Values {
		if v.Name == "backlog" {
			gotB = v.Value
		}
	}
	if gotB == strconv.Itoa(asked) {
		return mm
	}
	e, _ := mm.(*reuseport.OptionMismatchError)
	if e == nil {
		e = &reuseport.OptionMismatchError{}
	}
	e.Diffs = append(e.Diffs, reuseport.OptionDiff{Option: "backlog", Want: strconv.Itoa(asked), Got: gotB})
	return e
}

// sockname returns the address a socket is bound to, as a literal.
func sockname(fd int) (string, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return "", os.NewSyscallError("getsockname", err)
	}
	return sockaddrString(sa), nil
}
