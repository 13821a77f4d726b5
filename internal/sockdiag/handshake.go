package sockdiag

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Handshake is a TCP handshake in progress: a request socket (the kernel's
// NEW_SYN_RECV state, reported by inet_diag as SYN_RECV) created when a SYN
// reached a listener and kept until the client's ACK makes it a connection in
// that listener's accept queue.
type Handshake struct {
	Addr   netip.AddrPort // local address: the listener's address and port
	Cookie uint64         // the request socket's own cookie, unique while it lives
}

// Handshakes dumps the handshakes in progress on local port (0: every port)
// in the calling thread's network namespace, IPv4 first. inet_diag does not
// say which listener of a reuseport group a request socket belongs to (its
// inode and UID read 0), so callers get the port's, a superset of any one
// member's. No capability is needed; Linux 4.4.
func Handshakes(port uint16) ([]Handshake, error) {
	fd, err := open()
	if err != nil {
		return nil, fmt.Errorf("sockdiag: handshakes: %w", err)
	}
	defer unix.Close(fd)
	var out []Handshake
	var seq uint32
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := dump(fd, family, port, handshakeStates, &seq)
		if err != nil {
			return nil, fmt.Errorf("sockdiag: handshakes %s: %w", familyName(family), err)
		}
		for _, l := range ls {
			out = append(out, Handshake{Addr: l.Addr, Cookie: l.Cookie})
		}
	}
	return out, nil
}
