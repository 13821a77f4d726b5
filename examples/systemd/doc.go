// Command systemd is an HTTP server run by systemd the zerodrop way: its
// listening socket comes from socket activation (zerodrop-example.socket) or,
// without a socket unit, from the service's fd store, so a restart never
// closes it and the accept queue survives while no process runs.
//
//	systemd-socket-activate -l 127.0.0.1:8080 --fdname=http \
//	    ./systemd -name http -ignore-options SO_REUSEPORT   # try it by hand
//	curl 127.0.0.1:8080/                                     # generation 1 pid N inode I
//	curl 127.0.0.1:8080/metrics                              # zerodrop_generation, drains, handoffs, kernel counters
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
// generation serves, rather than trusting that a command returned 0. With
// -cert and -key it serves HTTPS (drain.Server.ServeTLS; HTTP/2 and HTTP/1.1
// by ALPN) on the same activated socket, and the drain answers a connection
// accepted before the stop whose handshake comes after it.
//
// zerodrop.Serve does steps 1, 2, 4 and 5 (and a reload's MAINPID=) by
// itself; examples/upgrade and examples/workers use it. This program wires the
// packages by hand because it shows what Serve does not: the fd store (-store,
// systemd.Notifier.Store), options checked with some left out
// (-ignore-options, for a .socket unit that sets no SO_REUSEPORT), and the
// socket's inode in every answer.
//
// # Reload: a binary upgrade through package handoff
//
// With -socket PATH the listener goes through a handoff.Upgrader (the
// predecessor's socket, else systemd's, else a fresh one), and SIGHUP starts
// the next generation without a restart:
//
//  1. The running process sends RELOADING=1 (with MONOTONIC_USEC) and starts
//     its own executable again with the same arguments.
//  2. The successor inherits the listener over PATH (the same kernel socket:
//     nothing is queued, migrated or reset), stores it (-store), serves it,
//     sends MAINPID=<its pid>, completes the handoff (Upgrader.Ready) and
//     sends READY=1. Its generation is one more; it pings the watchdog.
//  3. The old process drains (drain.Server.Shutdown: every accepted request
//     is answered; no STOPPING=1, the service goes on) and exits 0.
//
// If the successor cannot start or exits first, the old process sends READY=1
// again and keeps serving. "zerodrop upgrade --socket PATH --pid P --signal
// HUP" is the synchronous trigger: it exits 0 only when a newer generation
// serves PATH. MAINPID= is sent before the handoff completes, so that systemd
// never sees its main process exit; if the handoff then fails, the successor
// gives MAINPID back to its parent.
//
// # Under the real systemd
//
// The sysd*_test.go tests boot Debian's systemd 252 as PID 1 of a sandbox
// (internal/sysdbox) and run these units there, with clients inside the
// sandbox's network namespace opening a new connection per request:
//
//   - TestSystemdSocketActivation: nothing runs until the first request,
//     which starts the service and is answered from the socket systemd bound;
//     the first start gets LISTEN_PID=<its pid> LISTEN_FDS=1
//     LISTEN_FDNAMES=http, a restart LISTEN_FDS=2 LISTEN_FDNAMES=http:http
//     (the socket unit's fd and the store's copy of the same socket; -store
//     leaves NFileDescriptorStore at 1).
//
//   - TestSystemdRestartFDStore (no socket unit): 20 systemctl restart, 0
//     failed requests, NFileDescriptorStore 1 and the same socket inode
//     throughout; systemctl stop empties the store and closes the socket.
//     Restarts count against StartLimitBurst= (5 in 10 s).
//
//   - TestSystemdReload: 20 systemctl reload, 0 failed; when the command
//     returns, MainPID is the new generation and the unit active again; the
//     last successor's watchdog pings are accepted (WatchdogSec=2).
//     TestSystemdReloadNotifyAccessMain shows why NotifyAccess=all.
//
//   - TestSystemdStop: STOPPING=1 reaches systemd, every accepted request is
//     answered; clients still queued when systemd closes the stored socket
//     after the process exited are reset (at most one per client).
//
//   - TestSystemdWatchdog: a process hung by SIGSTOP is killed by the
//     watchdog and restarted; the clients that queued meanwhile are answered
//     by the new process from the same socket.
//
//   - TestSystemdTLS: the same units serving HTTPS (-cert, -key): a
//     systemctl restart and then 3 systemctl reload under Go HTTPS, HTTP/2
//     and curl load, 0 failed; 20 clients accepted before the restart's
//     stop that handshake 20 ms after it are all answered by the old process.
//
//   - TestSystemdReloadThenRestart: a systemctl restart after a reload
//     drains like one before it, 0 failed. systemd takes a main process that
//     is not its child for an "alien" one it cannot wait for (decided when
//     MAINPID= names it) and at a stop sends it SIGKILL right after SIGTERM:
//     no drain, requests reset. So the successor is started as systemd's
//     child, not ours (systemd.StartSuccessor, clone(2) CLONE_PARENT); a
//     second MAINPID= once the predecessor has exited does not help, as
//     systemd ignores a MAINPID= that names the main process it has.
//
// # The units
//
// zerodrop-example.socket and zerodrop-example.service (comments on each
// setting) run it on port 8080. ExecReload= runs zerodrop upgrade with
// --pid $MAINPID, so "systemctl reload" returns success only when the new
// generation serves; NotifyAccess=all lets the successor send MAINPID= and
// READY=1.
package main
