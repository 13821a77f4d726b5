// Package reuseport creates SO_REUSEPORT listeners that are safe to join, and
// shows the group they join as the kernel sees it.
//
// # How it works
//
// All sockets bound to one address:port with SO_REUSEPORT form a group; the
// kernel spreads new connections over its members by a hash of the 4-tuple.
// When a member closes, the connections in its accept queue are reset, unless
// net.ipv4.tcp_migrate_req=1 (Linux 5.14+) moves them to a sibling. Listen
// creates the socket explicitly (socket, setsockopt, bind, listen), so that:
//
//   - it is IPPROTO_TCP. Go 1.24+ makes net.Listen sockets MPTCP by default; a
//     closing MPTCP listener fast-closes its queued MPTCP connections (while
//     TCPMigrateReqSuccess still counts them), and reuseport eBPF programs refuse
//     it. Config.MPTCP opts in, knowingly.
//   - every option in Options is set before bind and read back after listen
//     (Listener.Effective, Listener.Adjustments: the kernel clamps the backlog to
//     somaxconn and doubles buffer sizes);
//   - the group's owners are checked before bind: the kernel lets only sockets of
//     one UID share a port, comparing socket owners (the creator's fsuid at
//     socket() time), and says nothing but EADDRINUSE. Listen names the owner
//     (UIDMismatchError) and explains any other EADDRINUSE (AddrInUseError);
//   - net.ipv4.tcp_migrate_req is checked or enforced (MigrationPolicy).
//
// ReadSocket (and ReadFD) is zerodrop's one reader of what a socket is: family,
// type, protocol, listening, address, cookie and the option digest, read once
// from the fd; handoff, handoff/systemd, steer and drain all use it.
// Config.Check is the one option check of a socket made elsewhere against a
// Config, naming each difference; NewListener and NewPacketConn wrap such a
// socket so that every listener has Digest and Effective. ReadDigest reads the
// canonical option set of any live socket; Digest.Compare names the options
// that differ. Inspect lists a group's members through NETLINK_SOCK_DIAG with
// their UIDs, queues, backlogs and processes. ReadQueue reads a listener's
// accept queue from TCP_INFO. ReadCounters snapshots the TcpExt/Tcp counters.
//
// # Ownership
//
// Listen and ListenPacket return sockets the caller owns. ReadDigest,
// ReadQueue and Control use the caller's fd without duplicating or closing it.
//
// # Privileges and kernel
//
// Listening needs no privilege (ports below 1024 need CAP_NET_BIND_SERVICE).
// MigrationEnable, SO_MARK and IP_TRANSPARENT need CAP_NET_ADMIN. Naming the
// processes of another user's sockets needs root (or CAP_SYS_PTRACE); without
// it, errors say that PIDs are missing. SO_REUSEPORT needs Linux 3.9;
// tcp_migrate_req 5.14. Everything here reads the network namespace of the
// calling thread.
package reuseport
