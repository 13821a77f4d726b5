package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestSystemdReload: the shipped units, 20 "systemctl reload" under load.
// ExecReload= runs zerodrop upgrade --pid $MAINPID --signal HUP; each time
// the main process starts its successor, which inherits the socket over the
// handoff socket, sends MAINPID=<itself> (NotifyAccess=all) and READY=1.
// When systemctl reload returns, MainPID is already the new process and the
// unit is active again; the new generation answers; no request fails, the
// socket's inode never changes, no restart happened, and each old generation
// exits, leaving one process in the service's cgroup. With WatchdogSec=2 the
// last successor is not killed: systemd takes its WATCHDOG=1.
func TestSystemdReload(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, true, map[string]string{service + ".d/watchdog.conf": "[Service]\nWatchdogSec=2\n"})
	u.systemctl("start", socket, service)
	l := u.listener()
	before := u.counters()
	ld := startLoadVia(t, boxURL, 4, u.DialContext)
	ld.waitFor(t, "1", 20)
	const reloads = 20
	var took []time.Duration
	for gen := 2; gen <= reloads+1; gen++ {
		old := u.mainPID()
		start := time.Now()
		u.systemctl("reload", service)
		took = append(took, time.Since(start))
		pid := u.mainPID()
		if pid == old || pid == 0 {
			t.Fatalf("reload to generation %d: MainPID %d when systemctl reload returned, was %d", gen, pid, old)
		}
		if st := u.show("ActiveState"); st != "active" {
			t.Fatalf("reload to generation %d: ActiveState %s when systemctl reload returned, want active", gen, st)
		}
		want := body(gen, pid, l.Inode)
		u.waitFor(fmt.Sprintf("GET answered %q", want), func() bool { return u.get() == want })
		if got := u.listener(); got.Inode != l.Inode {
			t.Fatalf("reload to generation %d: listening inode %d, want %d", gen, got.Inode, l.Inode)
		}
	}
	ld.waitFor(t, strconv.Itoa(reloads+1), 20)
	// WatchdogSec=2: the last generation, a successor that took over with
	// MAINPID=, must be pinging, or systemd kills it within 2 s.
	last := u.mainPID()
	time.Sleep(5 * time.Second)
	if pid := u.mainPID(); pid != last {
		t.Errorf("MainPID %d 5 s after the last reload, was %d: the watchdog did not accept the successor's pings", pid, last)
	}
	byGen, failed := ld.stop()
	t.Logf("%d reloads: answered by generation %v, failed %d; systemctl reload took %s", reloads, byGen, len(failed), spread(took))
	if len(failed) != 0 {
		t.Errorf("failed requests %v, want none", failed)
	}
	if n := u.show("NRestarts"); n != "0" {
		t.Errorf("NRestarts %s after the reloads, want 0", n)
	}
	cg := "/sys/fs/cgroup" + u.show("ControlGroup") + "/cgroup.procs"
	main := strconv.Itoa(u.mainPID())
	u.waitFor("only the main process "+main+" left in "+cg, func() bool { return procsIn(t, u, cg) == main })
	u.noLoss(before)
}

// procsIn lists the PIDs in a cgroup.procs file of the box, as the box
// numbers them, space-separated.
func procsIn(t *testing.T, u *unitBox, path string) string {
	t.Helper()
	out, err := u.Exec(u.ctx, "cat", path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(strings.Fields(string(out)), " ")
}

// TestSystemdReloadNotifyAccessMain: with NotifyAccess=main (the Type=notify
// default) systemd drops every message of the successor ("reception only
// permitted for main PID"), MAINPID= included. When the old main process
// exits after the handoff, systemd takes that for the service's end
// ("Deactivated successfully") and stops the successor that was serving,
// while "systemctl reload" still reports success. Hence NotifyAccess=all.
func TestSystemdReloadNotifyAccessMain(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, true, map[string]string{service + ".d/notify.conf": "[Service]\nNotifyAccess=main\n"})
	u.systemctl("start", socket, service)
	u.systemctl("reload", service)
	u.waitJournal("reception only permitted for main PID")
	u.waitFor("the service inactive after the old main process exited", func() bool {
		return u.show("ActiveState") == "inactive"
	})
	if pid := u.mainPID(); pid != 0 {
		t.Errorf("MainPID %d after the service ended", pid)
	}
}

// TestSystemdStop: "systemctl stop" of the service (fd store only, no socket
// unit) while clients open a new connection per request. The server sends
// STOPPING=1 (systemd logs the notification at debug level), drains and
// releases the socket; every request it accepted is answered: no client got
// an empty reply (EOF) or waited out its timeout. The others are refused, or
// reset if they were still queued when systemd closed the stored socket
// after the process exited: systemd 252 empties the fd store at a stop, and
// nobody accepts what is queued then (measured: 8 of 8 waiting clients).
func TestSystemdStop(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, false, nil)
	u.systemctl("start", service)
	pid := u.mainPID()
	const workers = 8
	ld := startLoadVia(t, boxURL, workers, u.DialContext)
	ld.waitFor(t, "1", 50)
	u.systemctl("log-level", "debug")
	before := u.counters()
	u.systemctl("stop", service)
	time.Sleep(200 * time.Millisecond) // let the clients meet the closed port
	byGen, failed := ld.stop()
	after := u.counters()
	tally := netnstest.Tally{}
	for _, err := range failed {
		tally[netnstest.Classify(err)]++
	}
	rsts := int(after["Tcp.OutRsts"] - before["Tcp.OutRsts"])
	t.Logf("answered %v; failed: %v; Tcp.OutRsts +%d", byGen, tally, rsts)
	if tally[netnstest.EOF]+tally[netnstest.Timeout]+tally[netnstest.Other] != 0 {
		t.Errorf("failures %v: an accepted request was not answered (EOF, timeout or other): %v", tally, failed)
	}
	// A client waits for one request at a time, so at most one per worker
	// was queued when systemd closed the stored socket.
	if tally[netnstest.Reset] > workers {
		t.Errorf("%d resets, want at most one per client (%d)", tally[netnstest.Reset], workers)
	}
	j := u.waitJournal("stopped: release")
	if want := fmt.Sprintf("Got notification message from PID %d (STOPPING=1, STATUS=generation 1 draining)", pid); !strings.Contains(j, want) {
		t.Errorf("journal has no %q", want)
	}
	if n := u.listeners(); n != 0 {
		t.Errorf("%d listeners on %d after stop, want 0", n, boxPort)
	}
}

// TestSystemdWatchdog: WatchdogSec=2 and the service (fd store only) hung by
// SIGSTOP. systemd's watchdog kills it and Restart=on-failure starts it again
// with the socket from the fd store: 10 clients that connected while it hung
// are all answered by the new process, from the same socket, and nothing was
// reset.
//
// WatchdogSignal=SIGKILL here: with the default SIGABRT, systemd follows the
// signal with SIGCONT, and the Go process runs again while it prints its
// goroutines: in 2 of 4 runs it accepted the queued connections, once
// answering all 10 before it died, once dying with them (a client read EOF).
func TestSystemdWatchdog(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, false, map[string]string{service + ".d/watchdog.conf": "[Service]\nWatchdogSec=2\nWatchdogSignal=SIGKILL\n"})
	u.systemctl("start", service)
	hung := u.mainPID()
	l := u.listener()
	u.get()
	before := u.counters()
	if _, err := u.Exec(u.ctx, "kill", "-STOP", strconv.Itoa(hung)); err != nil {
		t.Fatal(err)
	}
	u.waitFor(fmt.Sprintf("every thread of pid %d stopped", hung), func() bool {
		out, err := u.Exec(u.ctx, "sh", "-c", fmt.Sprintf("cat /proc/%d/task/*/stat", hung))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l[strings.LastIndexByte(l, ')')+1:]); len(f) == 0 || f[0] != "t" && f[0] != "T" {
				t.Logf("not stopped: %s", l[:min(len(l), 60)])
				return false
			}
		}
		return true
	})
	const queued = 10
	conns := make([]net.Conn, 0, queued)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range queued {
		c, err := u.DialContext(u.ctx, "tcp", "127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: box\r\nConnection: close\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
	}
	u.waitFor("a new main process after the watchdog", func() bool {
		pid := u.mainPID()
		return pid != hung && pid != 0 && u.show("ActiveState") == "active"
	})
	pid := u.mainPID()
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("queued client %d: %v", i, err)
		}
		b := make([]byte, 256)
		n, _ := resp.Body.Read(b)
		resp.Body.Close()
		if got, want := strings.TrimSpace(string(b[:n])), body(1, pid, l.Inode); resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("queued client %d: %d %q, want 200 %q", i, resp.StatusCode, got, want)
		}
	}
	if got := u.listener(); got.Inode != l.Inode {
		t.Errorf("listening inode %d after the watchdog restart, want %d", got.Inode, l.Inode)
	}
	if n := u.show("NRestarts"); n != "1" {
		t.Errorf("NRestarts %s, want 1", n)
	}
	u.waitJournal("Watchdog timeout")
	u.noLoss(before)
}

// TestSystemdReloadThenRestart: a "systemctl restart" after a "systemctl
// reload" drains like one before it. systemd holds a main process that is
// not its child for an "alien" one it cannot wait for, decided when MAINPID=
// names it: at the stop it sent SIGTERM and, not waiting, SIGKILL right
// after, so the successor's drain never ran (before the fix, the successor
// being the predecessor's child: "Supervising process P which is not our
// child", then "Killing process P (zerodrop-exampl) with signal SIGKILL",
// "status=9/KILL", and 2-3 requests reset). The predecessor now starts the
// successor as systemd's child (systemd.StartSuccessor, CLONE_PARENT).
func TestSystemdReloadThenRestart(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, true, nil)
	u.systemctl("start", socket, service)
	ld := startLoadVia(t, boxURL, 4, u.DialContext)
	ld.waitFor(t, "1", 20)
	u.systemctl("reload", service)
	succ := u.mainPID()
	ld.waitFor(t, "2", 20)
	cg := "/sys/fs/cgroup" + u.show("ControlGroup") + "/cgroup.procs"
	u.waitFor("the predecessor gone from "+cg, func() bool { return procsIn(t, u, cg) == strconv.Itoa(succ) })

	u.systemctl("restart", service)
	pid := u.mainPID()
	if pid == succ || pid == 0 {
		t.Fatalf("MainPID %d after systemctl restart, was %d", pid, succ)
	}
	ld.waitFor(t, "1", 40) // the new process serves (generation 1 again)
	byGen, failed := ld.stop()
	j := u.waitJournal("stopped:")
	t.Logf("answered by generation %v, failed %d; %d drains in the journal", byGen, len(failed), countLines(j, "stopped:"))
	if len(failed) != 0 {
		t.Errorf("failed requests %v, want none", failed)
	}
	for _, bad := range []string{"which is not our child", "with signal SIGKILL", "status=9/KILL"} {
		if strings.Contains(j, bad) {
			t.Errorf("the journal says %q: systemd did not wait for the successor to drain", bad)
		}
	}
	if n := countLines(j, "stopped:"); n < 2 {
		t.Errorf("%d drains in the journal, want 2 (the predecessor at the reload, the successor at the restart)", n)
	}
}
