// Package sockdiag is the kernel's view of TCP listeners: what
// NETLINK_SOCK_DIAG reports about them, which processes hold them, and which
// network namespace the caller is in.
//
// # How it works
//
// Listeners sends one SOCK_DIAG_BY_FAMILY dump request (struct
// inet_diag_req_v2, states = 1<<TCP_LISTEN) per address family over a
// NETLINK_SOCK_DIAG socket and decodes the struct inet_diag_msg replies by hand
// with golang.org/x/sys/unix. The netlink socket is created on a locked OS
// thread, so the dump covers that thread's network namespace; a caller that has
// entered another namespace with setns on a locked thread gets that namespace.
//
// Owners maps socket inodes to processes by reading the "socket:[N]" links in
// /proc/*/fd. Processes that exit during the scan are skipped; fd directories
// that cannot be read are reported, never ignored silently.
//
// Handshakes dumps the request sockets of a port (states SYN_RECV and
// NEW_SYN_RECV): inet_diag reports them with the listener's port but inode
// and UID 0, so they cannot be attributed to one member of a reuseport group.
// IncomingCPU reads a listener's SO_INCOMING_CPU, which inet_diag does not
// report, through a copy of a holder's fd (FDs finds its number, LocalPID
// translates /proc's PID to the caller's PID namespace, pidfd_getfd copies
// it).
//
// # Security
//
// Dumping listeners needs no privilege: any user sees every listener of the
// namespace, with its owner UID. Reading another process's /proc/PID/fd needs
// ptrace read access (same UID, or CAP_SYS_PTRACE); without it the PID is
// reported as unreadable. IncomingCPU needs ptrace attach access
// (pidfd_getfd: the same UID, unless Yama's ptrace_scope restricts it, or
// CAP_SYS_PTRACE).
//
// # Kernel requirements
//
// Linux 3.3 (inet_diag_req_v2 and SOCK_DIAG_BY_FAMILY); NetNS needs 3.17
// (/proc/thread-self), Handshakes 4.4 (request sockets in the established
// hash), IncomingCPU 5.6 (pidfd_getfd).
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package sockdiag
