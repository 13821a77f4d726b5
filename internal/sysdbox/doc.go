// Package sysdbox boots Debian's real systemd as PID 1 of a sandbox, for
// tests that must agree with systemd itself rather than with a stand-in.
//
// # The box
//
// Boot starts unshare in a new cgroup (below the test's own, in the cgroup2
// hierarchy), which creates PID, mount, network, UTS, IPC and cgroup
// namespaces; setup.sh then builds the box's root and execs
// /lib/systemd/systemd --unit=basic.target as PID 1, with
// container=zerodrop-test as its whole environment:
//
//   - / is an overlay of the machine's / (read-only below) with a tmpfs upper
//     layer: nothing systemd or a unit writes reaches the machine;
//   - /tmp, /var/tmp and /run are fresh tmpfs mounts: systemd-tmpfiles empties
//     /tmp at boot (D /tmp), and must never see the machine's;
//   - /proc is the new PID namespace's, with /proc/sys read-only except
//     /proc/sys/net (the box's network namespace); /sys is read-only with a
//     cgroup2 hierarchy whose root is the box's cgroup; /dev is a tmpfs with
//     null, zero, full, random, urandom and tty, a new devpts and a private
//     /dev/shm;
//   - systemd's capability bounding set lacks CAP_SYS_MODULE, CAP_SYS_TIME,
//     CAP_SYS_RAWIO, CAP_SYSLOG, CAP_WAKE_ALARM and the MAC capabilities.
//
// Boot waits, at most 90 s, until systemctl is-system-running --wait (run
// inside through nsenter -t PID -a) says running or degraded, and records
// which (State, Failed). Booting basic.target rather than multi-user.target
// keeps the machine's enabled services (nginx, databases) out of the box.
//
// # Using it
//
// Boot is for tests; Start boots a box for a program (the restart
// benchmark's zd-systemd-pid1 contender), and with Options.SharedNetwork the
// box keeps the caller's network namespace instead of a new one, so that the
// caller's own threads load the box's services. The caller's /proc must be
// its PID namespace's: the box's PID is read there.
//
// Install writes a unit and reloads systemd; CopyIn puts a binary of the test
// in the box; Systemctl, Show, Journal and Exec run commands inside; Command
// starts a long-running one. InNet runs a function on a thread in the box's
// network namespace: clients dialled there, sockdiag dumps and
// linux.ReadSNMP counters are the box's.
//
// # Teardown
//
// Close sends SIGRTMIN+4 (poweroff) to systemd until it exits, at most 60 s,
// then kills what is left, by PID (its cgroup lists them). It checks that every process the
// box had (PID and start time) is gone and the cgroup empty, removes the
// cgroup tree, and checks that the test process's /proc/self/mountinfo lost
// no mount it had at Boot and gained none of the box's (others may come and
// go: other tests on the machine mount too). TestBoot checks the machine's
// side: sentinel files in /tmp, /var/tmp and /run survive, and so does every
// entry of /tmp and /run older than 10 minutes (younger ones may be other
// tests'); the box's files do not appear there.
//
// # Privilege
//
// Root (Boot calls netnstest.RequirePrivileged), a kernel with cgroup2,
// overlayfs and clone3's CLONE_INTO_CGROUP (Linux 5.7), and the systemd and
// util-linux packages. Without them Boot skips, or fails with the reason
// under ZERODROP_REQUIRE_PRIVILEGED=1.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package sysdbox
