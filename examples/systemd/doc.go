// Command systemd is an HTTP server run by systemd the zerodrop way: its
// listening socket comes from socket activation (zerodrop-example.socket) or,
// without a socket unit, from the service's fd store, so a restart never
// closes it and the accept queue survives while no process runs.
//
//	systemd-socket-activate -l 127.0.0.1:8080 --fdname=http \
//	    ./systemd -name http -ignore-options SO_REUSEPORT   # try it by hand
//	curl 127.0.0.1:8080/                                     # generation 1 pid N inode I
//
// # What it does
//
//  1. systemd.Activated reads LISTEN_* (and refuses a bad environment).
//  2. The listener named -name is taken from systemd, its options checked
//     against reuseport's defaults (CheckOptions; -ignore-options leaves some
//     out), or, when the process was not activated, created with
//     reuseport.Listen on -addr.
//  3. With -store, the listener is pushed into the fd store (FDSTORE=1); the
//     unit needs FileDescriptorStoreMax=.
//  4. READY=1 with STATUS= naming the generation, pid and socket inode; the
//     watchdog is pinged when WatchdogSec= asks for it.
//  5. On SIGTERM or SIGINT: STOPPING=1, then drain.Server.Shutdown: the
//     listener stops without losing its queue (systemd holds the same socket,
//     so the drain only closes our fd), every accepted request is answered,
//     then the process exits 0. The drain report goes to stderr as JSON.
//
// GET / answers "generation G pid P inode I": check from outside which
// generation serves, rather than trusting that a command returned 0.
//
// # The units
//
// zerodrop-example.socket and zerodrop-example.service (comments on each
// setting) run it on port 8080. A truthful ExecReload= (start the next
// generation, exit 0 only when it serves) is package handoff's trigger; the
// service leaves it out until that exists.
package main
