package handoff

import (
	"fmt"
	"sync"
)

// registry is the set of sockets we own, whatever their origin (inherited,
// systemd's, fresh): what we offer a successor, in Listen order, and the
// names Listen has used. Listen and ListenPacket add to it; the handoff
// server reads a snapshot (offer). It has its own lock; once closed it takes
// nothing more.
type registry struct {
	mu     sync.Mutex
	socks  []*socket // ours, in Listen order: what we offer
	names  map[string]bool
	closed bool
}

// reserve takes name for a socket about to be obtained: each name is used
// once, even if obtaining the socket fails.
func (r *registry) reserve(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.names[name] {
		return fmt.Errorf("socket name %q already in use", name)
	}
	if r.names == nil {
		r.names = map[string]bool{}
	}
	r.names[name] = true
	return nil
}

// add registers s, whose fd is our reference, and reports whether it did:
// once the registry is closed, it closes s's fd instead.
func (r *registry) add(s *socket) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		closeFDs([]int{s.fd})
		return false
	}
	r.socks = append(r.socks, s)
	return true
}

// offer returns our sockets as obtain described them: address and digest
// are read once, when we obtained the socket.
func (r *registry) offer() []*socket {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*socket(nil), r.socks...)
}

// close detaches every socket and returns them; the registry takes nothing
// more, and offers nothing. The caller closes our references once nothing
// can be sending them any more.
func (r *registry) close() []*socket {
	r.mu.Lock()
	defer r.mu.Unlock()
	socks := r.socks
	r.socks, r.closed = nil, true
	return socks
}
