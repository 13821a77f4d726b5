// Package systemd is the systemd side of a restart that loses no connection:
// socket activation as a source of listeners, the sd_notify(3) lifecycle of a
// service whose generations hand listeners to each other, and the file
// descriptor store that keeps a listening socket (and its accept queue) open
// while no process of the service runs.
//
// This comment is longer than a screen: it states the three systemd
// protocols as this package follows and checks them, which no one
// function's comment can hold. The API itself fits one screen: go doc
// -short github.com/zerodrop/zerodrop/handoff/systemd.
//
// # Socket activation
//
// Activated reads LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES once, unsets them
// so that children (a successor generation) do not inherit them, takes fds
// 3.. from go-systemd's activation.Files, and checks every one before handing
// any out: it must be open, be a socket, and gets FD_CLOEXEC. Each bad
// variable or fd is its own typed error (*EnvError, *FDError) matching one
// sentinel (ErrListenPID, ErrListenFDs, ErrListenFDNames, ErrFDMissing,
// ErrNotSocket, ErrTickets); nothing is dropped silently, unlike go-systemd's Files
// (which returns nil for a bad variable) and Listeners. Take hands out one fd at a time, by
// FileDescriptorName= (LISTEN_FDNAMES) or by local address, and checks its kind
// (listening TCP, UDP, unix); Listener also turns it into a net.Listener and,
// given a reuseport.Config, compares its options with the digest a fresh
// listener would have (CheckOptions), so a .socket unit that forgot
// ReusePort=yes is reported instead of discovered later.
//
// Where listeners come from, in order: a predecessor generation handing them
// over (package handoff), then systemd (Activated), then a fresh listen. The
// first two never meet: LISTEN_* are unset by the first Activated, so a
// successor started by a running generation sees no activation, and a process
// started by systemd has no predecessor.
//
// # The notify lifecycle
//
// A Notifier (FromEnv: $NOTIFY_SOCKET, a path or an abstract "@name") sends
// one datagram per call (through go-systemd's daemon.SdNotify for
// $NOTIFY_SOCKET; Store attaches an fd, which SdNotify cannot, so it has its
// own sendmsg): Ready (READY=1, STATUS= naming the generation),
// Reloading (RELOADING=1 with MONOTONIC_USEC, while a handoff runs), MainPID
// (MAINPID=<successor>, once the successor serves), Stopping (STOPPING=1 when
// draining starts), Status, and watchdog pings (StartWatchdog honours
// WATCHDOG_USEC and WATCHDOG_PID; Pinger serves a successor). Outside systemd
// FromEnv returns nil, and a nil Notifier's notifications are no-ops.
//
// A successor that sends MAINPID= must be systemd's child: systemd does not
// wait at a stop for a main process that is not (it sends SIGKILL right
// after SIGTERM, and the drain never runs). StartSuccessor starts it so
// (clone(2) CLONE_PARENT) when NOTIFY_SOCKET is set, except as PID 1 of a
// PID namespace (NamespaceInit), where the kernel refuses it: there the
// successor is a plain child, killed with the namespace when its predecessor
// exits: the predecessor must then stay alive as the namespace's init (as
// zerodrop.Serve does, Generation.Linger), or run behind one (podman --init,
// tini).
//
// # The fd store
//
// Store sends FDSTORE=1 and FDNAME= with the socket attached (SCM_RIGHTS);
// systemd keeps a duplicate and passes it back, named, in LISTEN_FDS at the
// next start, where Activated and Take find it. Remove sends FDSTOREREMOVE=1
// (a final stop that should release the port). The unit needs:
//
//   - FileDescriptorStoreMax=N (default 0: systemd drops FDSTORE=1 messages
//     without telling the sender);
//   - FileDescriptorStorePreserve= (systemd 254+) only to change how long the
//     store lives: "restart" (default) across restarts until the unit stops
//     for good, "yes" until the unit is unloaded, "no" while active only;
//   - NotifyAccess=all when a process other than the main one (a successor,
//     an ExecReload= command) sends notifications or stores fds; "main", the
//     Type=notify default, accepts only the main process.
//
// One stored fd is not a socket: zerodrop.Serve keeps its TLS session-ticket
// keys there, as a sealed memfd (package ticket) named zerodrop-tickets
// (ticket.FDName), so that a client resumes its session after a restart.
// Activated accepts an fd of that name only if ticket.Check does (a memfd of
// that name, sealed against any change, of a size of the keys' format) and
// hands it out through Tickets only, never as a socket; anything else under
// that name is ErrTickets. Count it in FileDescriptorStoreMax=.
//
// See examples/systemd for a .socket and a Type=notify .service.
//
// # Security
//
// The fds in LISTEN_FDS are trusted only when LISTEN_PID is this process: a
// LISTEN_PID of another process means the variables leaked from a parent and
// is an error (sd_listen_fds(3) would quietly ignore them). Sockets passed by
// systemd belong to the uid that created them (root for system units), and
// only sockets of one uid share a reuseport group (KERNEL.md).
//
// # Requirements
//
// Linux (the package builds on reuseport and x/sys/unix). Socket activation
// and the notify protocol need nothing from the kernel beyond unix sockets
// and SCM_RIGHTS; FDNAME= needs systemd 227+, FDSTOREREMOVE= 236+,
// MONOTONIC_USEC (Type=notify-reload) 253+, FileDescriptorStorePreserve= 254+.
// The package never installs signal handlers or exits.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package systemd
