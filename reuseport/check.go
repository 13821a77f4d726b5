package reuseport

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// Check compares s, a socket made elsewhere (inherited from a predecessor,
// passed by systemd), with what c would create for network ("tcp", "tcp4",
// "udp6", ...) in s's family, and names each difference. It is the one
// option check of zerodrop: package handoff runs it on inherited sockets and
// handoff/systemd's CheckOptions on activated ones.
//
// The rule: every option of the digest but the backlog must equal the one a
// socket made by c has (c's value is Want); for a stream socket the backlog
// must be what c asks, clamped to net.core.somaxconn as listen(2) clamps it
// (0 asks for somaxconn). Options named in ignore are left out (for example
// "backlog", or "SO_REUSEPORT" for a .socket unit without ReusePort=yes that
// the caller knowingly accepts). It returns nil, or an *OptionMismatchError
// (matching ErrOptionMismatch). Sockets that are not TCP or UDP give an error
// wrapping ErrNotSupported.
//
// To know what c gives, Check sets c's options on an unbound socket of s's
// family and type, reads its digest and closes it; the result is kept for
// the process's life (per network, family, type and c's options), as is
// somaxconn, read once with it.
func (c *Config) Check(network string, s *Socket, ignore ...string) error {
	if !s.inet() || (s.Type != unix.SOCK_STREAM && s.Type != unix.SOCK_DGRAM) {
		return fmt.Errorf("%w: options of a %s socket", ErrNotSupported, s.Network())
	}
	ref, err := c.reference(network, s.Family, s.Type)
	if err != nil {
		return err
	}
	want, got := ref.digest, s.Digest
	var mm *OptionMismatchError
	if !sameBut(want, got, "backlog") || len(ignore) > 0 {
		if err := want.Without(append(ignore, "backlog")...).Compare(got.Without(append(ignore, "backlog")...)); err != nil {
			mm = err.(*OptionMismatchError)
		}
	}
	if s.Type == unix.SOCK_STREAM && !slices.Contains(ignore, "backlog") {
		asked := c.Options.Backlog
		if asked == 0 || asked > ref.somaxconn {
			asked = ref.somaxconn
		}
		if got.Backlog() != asked {
			if mm == nil {
				mm = &OptionMismatchError{}
			}
			mm.Diffs = append(mm.Diffs, OptionDiff{Option: "backlog", Want: strconv.Itoa(asked), Got: strconv.Itoa(got.Backlog())})
		}
	}
	if mm == nil {
		return nil
	}
	return mm
}

// sameBut reports whether a and b list the same options with the same values
// in the same order, except option but: the allocation-free common case of
// Compare.
func sameBut(a, b Digest, but string) bool {
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

// reference is what a Config gives a new socket of one kind.
type reference struct {
	digest    Digest
	somaxconn int
}

// maxReferences bounds the cache of references: a process has few configs.
const maxReferences = 64

var references struct {
	sync.Mutex
	m map[string]reference
}

// reference returns, from the cache or from a probe socket, the digest of a
// socket that c would create for network in family, of type typ.
func (c *Config) reference(network string, family, typ int) (reference, error) {
	key := c.referenceKey(network, family, typ)
	references.Lock()
	ref, ok := references.m[key]
	references.Unlock()
	if ok {
		return ref, nil
	}
	ref, err := c.probe(network, family, typ)
	if err != nil {
		return ref, err
	}
	references.Lock()
	if references.m == nil || len(references.m) >= maxReferences {
		references.m = make(map[string]reference)
	}
	references.m[key] = ref
	references.Unlock()
	return ref, nil
}

// referenceKey names what the reference depends on: network, family, type,
// MPTCP and the options.
func (c *Config) referenceKey(network string, family, typ int) string {
	o := c.Options
	cpu := "-"
	if o.IncomingCPU != nil {
		cpu = strconv.Itoa(*o.IncomingCPU)
	}
	o.IncomingCPU = nil
	return fmt.Sprintf("%s/%d/%d/%t/%s/%+v", network, family, typ, c.MPTCP, cpu, o)
}

// probe sets c's options on an unbound socket and reads its digest.
func (c *Config) probe(network string, family, typ int) (reference, error) {
	proto := unix.IPPROTO_UDP
	if typ == unix.SOCK_STREAM {
		proto = unix.IPPROTO_TCP
		if c.MPTCP {
			proto = unix.IPPROTO_MPTCP
		}
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return reference{}, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	if err := c.validate(); err != nil {
		return reference{}, err
	}
	s := &Socket{Family: family, Type: typ, Protocol: proto}
	o := c.Options
	if network == "tcp6" || network == "udp6" {
		o.V6Only = true
	}
	if err := setOptions(fd, s.kind(), &o); err != nil {
		return reference{}, err
	}
	d, _, err := readOptions(fd, s)
	if err != nil {
		return reference{}, err
	}
	ref := reference{digest: d, somaxconn: 4096}
	if v, err := linux.ReadSysctl("net.core.somaxconn"); err == nil {
		if n, err := strconv.Atoi(v); err == nil {
			ref.somaxconn = n
		}
	}
	return ref, nil
}
