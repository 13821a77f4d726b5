// Command zerodrop is the operator's tool for zerodrop: it reads what the
// kernel knows about the listening sockets of the current network namespace
// (doctor), and upgrades a server that hands its sockets over, telling the
// truth about the result (upgrade).
//
// # zerodrop doctor
//
//	zerodrop doctor [--port N] [--json] [--watch] [--bpffs DIR]
//
// doctor lists every TCP listener, grouped by address:port (a group with more
// than one listener is a SO_REUSEPORT group), with each member's socket inode,
// owner UID, the PIDs and commands holding it, its accept-queue length, its
// backlog (NETLINK_SOCK_DIAG and /proc/*/fd) and its SO_INCOMING_CPU (CPU:
// "-" when not set, "?" when no holder let us read it; read through a copy of
// the holder's fd, pidfd_getfd, as inet_diag does not show it). It shows
// net.ipv4.tcp_migrate_req and the TcpExt/Tcp counters of the namespace, says
// what those counters do and do not prove, and names each problem with a
// stable code, a sentence and the fix:
//
//   - migration-disabled: a reuseport group exists and tcp_migrate_req is 0, so
//     closing a member resets its accept queue and no TcpExt counter shows it.
//     A group whose steering program has a live slot is exempt: the program
//     migrates whatever the sysctl says.
//   - queue-over-backlog: a queue holds more than backlog+1 connections, the
//     most the kernel admits by itself: connections migrated from a closed
//     sibling overflowed it (migration ignores the target's backlog).
//   - listen-overflows: with --watch, TcpExt.ListenOverflows rose between two
//     reads one second apart: a full queue dropped SYNs.
//   - cpu-uncovered: members of a group set SO_INCOMING_CPU and no member
//     prefers some online CPU: a SYN handled there goes to whichever member
//     the hash finds first (Linux 6.1+), and drain.Options.StepOut refuses to
//     step a member out. A pool with fewer listeners than CPUs shows it.
//
// # Steering
//
// For each group that package reuseport/steer has pinned a program for
// (under --bpffs, default /sys/fs/bpf/zerodrop, then <netns inode>/<ip>-<port>),
// doctor opens the pins without joining and shows every taken slot: its
// index, state (live or draining), the listener holding it (inode, found by
// socket cookie; none once the listener is closed), option class, weight,
// reported load, and the program's counters: connections steered to it,
// migrated in and out, and migrating connections dropped. A missing bpf
// filesystem or missing permission is a note, never a failure.
//
// --port N shows only the listeners on port N (the counters are always
// namespace-wide). --json prints one JSON object with migrate_req, groups
// (address, port, members with inode, uid, pids, commands, queue, backlog,
// cookie, and a steer object with dir and slots when a program is pinned),
// counters, counters_delta (with --watch), notes and problems (code, message,
// fix).
//
// # zerodrop upgrade
//
//	zerodrop upgrade --socket PATH (--pid N [--signal HUP] | -- CMD [ARGS...]) [--timeout 2m] [--json]
//
// upgrade is the ExecReload= that tells the truth. It asks the process serving
// the handoff socket PATH (package handoff) for its generation, then starts
// the next one: by sending --signal to --pid (a server that starts its own
// successor on SIGHUP, such as examples/upgrade; under systemd, $MAINPID), or
// by running CMD, which outlives the command. It waits (handoff.Upgrade) until
// a newer generation serves PATH, as seen from outside, and prints from and to
// generation, the new pid and how long it took; --json prints the same as one
// object (ok, socket, from, to, pid, took_ms, and generation and reason on
// failure). It fails, with the reason, when nobody serves PATH, when the
// serving process reports a failed handoff, when CMD exits with an error, or
// after --timeout. It must run as the server's user (the handoff socket
// answers only its own UID).
//
// Exit status: 0 when the new generation serves, 1 when it does not, 2 for a
// bad command line.
//
// # Exit status (doctor)
//
// 0 when there is no problem, 1 when there are problems, 2 when the kernel
// could not be read (or the command line is wrong).
//
// # Privilege
//
// Listing listeners and counters needs no privilege. Finding the PIDs of
// another user's sockets reads their /proc/PID/fd, which needs root (or
// CAP_SYS_PTRACE); without it doctor says how many processes it could not
// read. Reading steering pins needs CAP_BPF (or root). Linux 3.3+;
// tcp_migrate_req and steering exist from Linux 5.14.
package main
