package sockdiag

import "net/netip"

// Listener is one TCP listening socket as inet_diag reports it.
type Listener struct {
	Addr      netip.AddrPort // bound local address (IPv6 sockets: the v6 address as is; unmap nothing)
	Family    int            // unix.AF_INET or unix.AF_INET6
	Inode     uint64         // socket inode, as in "socket:[N]" and fstat's st_ino
	UID       uint32         // socket owner: the creator's fsuid at socket() time
	Queue     uint32         // idiag_rqueue: current accept-queue length
	Backlog   uint32         // idiag_wqueue: max backlog
	Cookie    uint64         // idiag_cookie: SO_COOKIE of a TCP socket (of the subflow for MPTCP)
	Interface uint32         // idiag_if (bound device index, 0 if none)
}

// Process is a process holding a socket.
type Process struct {
	PID  int    // thread-group ID
	Comm string // /proc/PID/comm: the command name, at most 15 bytes
	UID  uint32 // effective UID, from /proc/PID/status
}
