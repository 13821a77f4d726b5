package sockdiag

import "net/netip"

// Handshake is a TCP handshake in progress: a request socket (the kernel's
// NEW_SYN_RECV state, reported by inet_diag as SYN_RECV) created when a SYN
// reached a listener and kept until the client's ACK makes it a connection in
// that listener's accept queue.
type Handshake struct {
	Addr   netip.AddrPort // local address: the listener's address and port
	Cookie uint64         // the request socket's own cookie, unique while it lives
}
