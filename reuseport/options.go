package reuseport

import (
	"time"
)

// Options is the one explicit set of socket options that matter when sockets
// share a reuseport group or a migrated connection. The zero value asks for the
// kernel's defaults. Every option is read back from the kernel after it is set
// (see Listener.Effective and Digest).
type Options struct {
	// Backlog is the accept-queue limit given to listen(2); 0 means
	// net.core.somaxconn (listen with -1). The kernel clamps larger values to
	// somaxconn, and migration ignores the target's backlog (KERNEL.md).
	Backlog int
	// DeferAccept sets TCP_DEFER_ACCEPT (whole seconds; the kernel rounds to
	// SYN-ACK retransmissions).
	DeferAccept time.Duration
	// FastOpen sets TCP_FASTOPEN with this queue length; 0 leaves it off.
	FastOpen int
	// SaveSYN sets TCP_SAVE_SYN, so accepted sockets keep their SYN headers.
	SaveSYN bool
	// IncomingCPU, when non-nil, sets SO_INCOMING_CPU. Once any member of a
	// group sets it, selection and migration prefer the member on the current CPU.
	IncomingCPU *int
	// RecvBuffer and SendBuffer set SO_RCVBUF and SO_SNDBUF (bytes; the kernel
	// doubles the value for its bookkeeping and reports the doubled size).
	RecvBuffer, SendBuffer int
	// NoDelay sets TCP_NODELAY on the listener; accepted sockets inherit it.
	NoDelay bool
	// KeepAlive configures keep-alive on the listener; accepted sockets inherit it.
	KeepAlive KeepAlive
	// V6Only sets IPV6_V6ONLY. For "tcp6"/"udp6" it is always on, as in package net;
	// for "tcp"/"udp" on an IPv6 or wildcard address it defaults to dual-stack.
	V6Only bool
	// FreeBind (IP_FREEBIND) and Transparent (IP_TRANSPARENT, needs
	// CAP_NET_ADMIN) allow binding non-local addresses.
	FreeBind, Transparent bool
	// Mark sets SO_MARK (needs CAP_NET_ADMIN).
	Mark uint32
	// BindToDevice sets SO_BINDTODEVICE to this interface name.
	BindToDevice string
	// UserTimeout sets TCP_USER_TIMEOUT (milliseconds resolution), inherited.
	UserTimeout time.Duration
	// Congestion sets TCP_CONGESTION (e.g. "cubic", "bbr"), inherited.
	Congestion string
}

// KeepAlive is the TCP keep-alive configuration accepted sockets inherit.
type KeepAlive struct {
	Enable   bool          // SO_KEEPALIVE
	Idle     time.Duration // TCP_KEEPIDLE (seconds); 0 = kernel default
	Interval time.Duration // TCP_KEEPINTVL (seconds); 0 = kernel default
	Count    int           // TCP_KEEPCNT; 0 = kernel default
}
