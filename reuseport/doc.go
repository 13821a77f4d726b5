// Package reuseport creates SO_REUSEPORT listeners that are safe to join, and
// shows the group they join as the kernel sees it.
//
// This comment is longer than a screen: it states the kernel's behaviour
// each function relies on (the group, migration, SO_INCOMING_CPU, the
// checks a joining socket gets). The API itself fits one screen: go doc
// -short github.com/zerodrop/zerodrop/reuseport.
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
// that differ. Inspect is zerodrop's one builder of a Group, the listeners on an
// address, through NETLINK_SOCK_DIAG with their UIDs, queues, backlogs,
// cookies, processes and (Group.ReadCPUs) CPUs; InspectMembers skips the
// /proc scan for holders (for metrics scrapes: package stats), InspectPort
// lists every group on a port (zerodrop doctor). ReadQueue reads a
// listener's accept queue from TCP_INFO. ReadCounters snapshots the TcpExt/Tcp
// counters.
//
// # CPU coverage
//
// Since Linux 6.1 the kernel's pick prefers, for each SYN, a member whose
// SO_INCOMING_CPU (Options.IncomingCPU) is the CPU handling it, scanning the
// group from the hashed slot; only when no member matches does it take the
// first listening member from there. A group covers every CPU when each
// online CPU (OnlineCPUs) has a member: ListenPerCPU opens one listener per
// CPU for one process; a pool of at least as many workers as CPUs can give
// each worker one. Then a member whose value is cleared (SetIncomingCPU with
// CPUNone) gets no new connection at all: it has stepped out of the pick,
// with no privilege and no eBPF, and can accept what is left and close
// without losing a connection, with tcp_migrate_req 0 or 1 (package drain,
// Options.StepOut). Inspect shows each member's CPU (Member.CPU, read through
// a copy of the holder's fd with pidfd_getfd, as sock_diag does not report
// it; CPUUnknown for another user's processes without root), Group.Uncovered
// and Group.CheckCovered which CPUs no member prefers. CPUPreference says
// whether the kernel has the preference (by its release: 6.1+).
//
// The cost is the scan: for each SYN the kernel walks the group from the
// hashed slot to the first member of the SYN's CPU, about as many members as
// there are CPUs on average. BenchmarkAcceptCPU compares accept throughput
// with groups of 4, 16 and 64 members (BENCHMARKS.md has this machine's).
//
// A reuseport BPF program (package reuseport/steer) replaces the pick, and
// SO_INCOMING_CPU is then not consulted: use one or the other per group.
// Whether a program someone else attached is present cannot be read without
// privilege.
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
// it, errors say that PIDs are missing (and Member.CPU is CPUUnknown).
// SO_REUSEPORT needs Linux 3.9; tcp_migrate_req 5.14; the CPU preference 6.1;
// reading another process's member CPU pidfd_getfd (5.6). Everything here reads the network namespace of the
// calling thread.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package reuseport
