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
// declared address, with the declared option digest. Reading the digest reads
// the domain and protocol too; they are not read twice.
func validate(fd int, s *socketInfo) (*reuseport.Digest, error) {
	if s.Kind == kindUnix {
		return nil, validateKind(fd, s, nil)
	}
	d, err := reuseport.ReadDigest(rawFD(fd))
	if err != nil {
		if kerr := validateKind(fd, s, nil); kerr != nil {
			return nil, kerr
		}
		return nil, &ValidationError{Name: s.Name, Check: "digest", Want: s.Digest, Err: err}
	}
	if err := validateKind(fd, s, &d); err != nil {
		return nil, err
	}
	if got := d.String(); got != s.Digest {
		return nil, &ValidationError{Name: s.Name, Check: "digest", Want: s.Digest, Got: got}
	}
	return &d, nil
}

// validateKind does every check of validate but the digest. With d, the
// domain and protocol are taken from it instead of read again.
func validateKind(fd int, s *socketInfo, d *reuseport.Digest) error {
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
		v, err := linux.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		return v, os.NewSyscallError("getsockopt", err)
	}
	dom, proto := -1, -1
	if d != nil {
		dom, proto = domainOf(value(*d, "SO_DOMAIN")), protoNum(value(*d, "SO_PROTOCOL"))
	}
	var err error
	if dom < 0 {
		dom, err = get(unix.SO_DOMAIN)
	}
	if err != nil || !domainOK(s.Network, dom) {
		return bad("SO_DOMAIN", s.Network, strconv.Itoa(dom), err)
	}
	typ := -1
	if d != nil && value(*d, "SO_TYPE") == "stream" {
		typ = unix.SOCK_STREAM // the digest says "dgram" for every other type
	} else {
		typ, err = get(unix.SO_TYPE)
	}
	wantTyp := unix.SOCK_STREAM
	if s.Kind == kindUDP {
		wantTyp = unix.SOCK_DGRAM
	}
	if err != nil || typ != wantTyp {
		return bad("SO_TYPE", strconv.Itoa(wantTyp), strconv.Itoa(typ), err)
	}
	if proto < 0 {
		proto, err = get(unix.SO_PROTOCOL)
	}
	if err != nil || !protoOK(s.Kind, proto) {
		return bad("SO_PROTOCOL", s.Kind, strconv.Itoa(proto), err)
	}
	if s.Kind != kindUDP {
		want := 1
		if s.Kind == kindTCPConn {
			want = 0
		}
		acc, err := get(unix.SO_ACCEPTCONN)
		if err != nil || acc != want {
			return bad("SO_ACCEPTCONN", strconv.Itoa(want), strconv.Itoa(acc), err)
		}
	}
	return checkSockname(fd, s)
}

// domainOf maps a digest's SO_DOMAIN value back to the address family; -1 if
// it is not one reuseport names.
func domainOf(name string) int {
	switch name {
	case "inet":
		return unix.AF_INET
	case "inet6":
		return unix.AF_INET6
	}
	return -1
}

func protoNum(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
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

// checkSockname compares getsockname with the declared address.
func checkSockname(fd int, s *socketInfo) error {
	got, err := linux.Sockname(fd)
	if err != nil {
		return &ValidationError{Name: s.Name, Check: "getsockname", Want: s.Address, Err: err}
	}
	if !sameAddr(s.Address, got) {
		return &ValidationError{Name: s.Name, Check: "getsockname", Want: s.Address, Got: got}
	}
	return nil
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

// checkOptions compares an inherited inet socket of kind (its digest got)
// with what cfg would create: a probe socket of the same kind and family gets
// cfg's options (never bound), and the two digests must agree; the backlog is
// compared with cfg's, clamped to net.core.somaxconn. It returns a
// *reuseport.OptionMismatchError naming every option that differs. The
// probe's digest is cached per network and family.
func (u *Upgrader) checkOptions(network, kind string, got reuseport.Digest) error {
	dom := unix.AF_INET
	if value(got, "SO_DOMAIN") == "inet6" {
		dom = unix.AF_INET6
	}
	typ := sockType(kind)
	want, err := u.want(network, dom, typ)
	if err != nil {
		return err
	}
	var mm error
	if !sameBut(want, got, "backlog") {
		mm = want.Without("backlog").Compare(got.Without("backlog"))
	}
	if typ != unix.SOCK_STREAM {
		return mm
	}
	return addBacklog(mm, u.cfg.Listen.Options.Backlog, u.somaxconn(), got)
}

// sockType is the socket type of an inet kind.
func sockType(kind string) int {
	if kind == kindUDP {
		return unix.SOCK_DGRAM
	}
	return unix.SOCK_STREAM
}

// want returns the digest of a socket that cfg would create for network and
// family dom, from the cache or from a probe socket.
func (u *Upgrader) want(network string, dom, typ int) (reuseport.Digest, error) {
	key := network + "/" + strconv.Itoa(dom)
	u.mu.Lock()
	want, ok := u.wants[key]
	u.mu.Unlock()
	if ok {
		return want, nil
	}
	want, err := probeDigest(&u.cfg.Listen, network, dom, typ)
	if err != nil {
		return want, err
	}
	u.mu.Lock()
	u.wants[key] = want
	u.mu.Unlock()
	return want, nil
}

// value returns the value of option name in d, or "".
func value(d reuseport.Digest, name string) string {
	for _, v := range d.Values {
		if v.Name == name {
			return v.Value
		}
	}
	return ""
}

// sameBut reports whether a and b list the same options with the same values
// in the same order, except option but: the allocation-free common case of
// Compare.
func sameBut(a, b reuseport.Digest, but string) bool {
	if len(a.Values) != len(b.Values) {
		return false
	}
	for i, v := range a.Values {
		if v.Name != b.Values[i].Name || (v.Value != b.Values[i].Value && v.Name != but) {
			return false
		}
	}
	return true
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
	gotB := value(got, "backlog")
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
