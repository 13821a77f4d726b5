package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestSystemdSocketActivation: under the real systemd, the shipped units
// (zerodrop-example.socket and .service) start nothing until the first
// request, which starts the service and is answered from the socket systemd
// bound (LISTEN_PID named the service's process: Activated accepted it).
func TestSystemdSocketActivation(t *testing.T) {
	netnstest.CheckLeaks(t)
	u := bootExample(t, true, nil)
	before := u.counters()
	u.systemctl("start", socket)
	if got := u.show("ActiveState"); got != "inactive" {
		t.Fatalf("the service is %s before any request, want inactive", got)
	}
	l := u.listener()
	got := u.get() // starts the service
	pid := u.mainPID()
	if want := body(1, pid, l.Inode); got != want {
		t.Fatalf("first request: %q, want %q (MainPID %d, the socket unit's inode %d)", got, want, pid, l.Inode)
	}
	if st, want := u.show("StatusText"), fmt.Sprintf("(from systemd, inode %d)", l.Inode); !strings.HasSuffix(st, want) {
		t.Errorf("StatusText %q, want it to end %q", st, want)
	}
	// -store pushes the activated socket into the fd store too: systemd
	// keeps it there (one entry), beside the socket unit's own fd.
	if n := u.show("NFileDescriptorStore"); n != "1" {
		t.Errorf("NFileDescriptorStore %s after -store of the activated socket, want 1", n)
	}
	if env := u.listenEnv(pid); env != fmt.Sprintf("LISTEN_PID=%d LISTEN_FDS=1 LISTEN_FDNAMES=http", pid) {
		t.Errorf("first start's environment: %q", env)
	}
	// A restart passes the socket unit's fds first, then the fd store's:
	// the same socket twice, both named http. The example takes the first
	// and closes the other.
	u.systemctl("restart", service)
	pid = u.mainPID()
	if env := u.listenEnv(pid); env != fmt.Sprintf("LISTEN_PID=%d LISTEN_FDS=2 LISTEN_FDNAMES=http:http", pid) {
		t.Errorf("environment after a restart: %q", env)
	}
	if got, want := u.get(), body(1, pid, l.Inode); got != want {
		t.Errorf("after the restart: %q, want %q", got, want)
	}
	u.systemctl("stop", socket, service)
	if n := u.listeners(); n != 0 {
		t.Errorf("%d listeners on %d after stopping both units, want 0", n, boxPort)
	}
	u.noLoss(before)
}

// listenEnv returns the LISTEN_* variables pid was started with (its
// /proc/PID/environ, which Activated's unsetenv does not change), in order.
func (u *unitBox) listenEnv(pid int) string {
	u.t.Helper()
	b, err := os.ReadFile(u.Path(fmt.Sprintf("/proc/%d/environ", pid)))
	if err != nil {
		u.t.Fatal(err)
	}
	var got []string
	for _, k := range []string{"LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES="} {
		for _, kv := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(kv, k) {
				got = append(got, kv)
			}
		}
	}
	return strings.Join(got, " ")
}

// TestSystemdRestartFDStore: the service without its socket unit, so the fd
// store alone keeps the socket. The first start listens and stores it; 20
// "systemctl restart" under load (new connection per request, from inside
// the box) fail no request: between restarts NFileDescriptorStore is 1, the
// listening socket's inode never changes, each new process says it got the
// socket from systemd, and the old one released it (its drain did not close
// the queue). The final stop empties the store and closes the socket.
func TestSystemdRestartFDStore(t *testing.T) {
	netnstest.CheckLeaks(t)
	// systemd counts every start, restarts included, against
	// StartLimitBurst= (5 in 10 s by default): the 6th quick restart fails
	// with "start of the service was attempted too often".
	u := bootExample(t, false, map[string]string{service + ".d/startlimit.conf": "[Unit]\nStartLimitIntervalSec=0\n"})
	u.systemctl("start", service)
	l := u.listener()
	if st, want := u.show("StatusText"), fmt.Sprintf("(listened, inode %d)", l.Inode); !strings.HasSuffix(st, want) {
		t.Fatalf("StatusText %q, want it to end %q", st, want)
	}
	if n := u.show("NFileDescriptorStore"); n != "1" {
		t.Fatalf("NFileDescriptorStore %s after the first start, want 1", n)
	}
	before := u.counters()
	ld := startLoadVia(t, boxURL, 4, u.DialContext)
	ld.waitFor(t, "1", 20)
	const restarts = 20
	var took []time.Duration
	for i := range restarts {
		old := u.mainPID()
		start := time.Now()
		u.systemctl("restart", service)
		took = append(took, time.Since(start))
		pid := u.mainPID()
		if pid == old || pid == 0 {
			t.Fatalf("restart %d: MainPID %d, was %d", i+1, pid, old)
		}
		if n := u.show("NFileDescriptorStore"); n != "1" {
			t.Fatalf("restart %d: NFileDescriptorStore %s, want 1", i+1, n)
		}
		if got := u.listener(); got.Inode != l.Inode {
			t.Fatalf("restart %d: listening inode %d, want %d", i+1, got.Inode, l.Inode)
		}
		if st, want := u.show("StatusText"), fmt.Sprintf("(from systemd, inode %d)", l.Inode); !strings.HasSuffix(st, want) {
			t.Fatalf("restart %d: StatusText %q, want it to end %q", i+1, st, want)
		}
		if got, want := u.get(), body(1, pid, l.Inode); got != want {
			t.Fatalf("restart %d: GET %q, want %q", i+1, got, want)
		}
	}
	byGen, failed := ld.stop()
	t.Logf("%d restarts: answered %v, failed %d; systemctl restart took %s", restarts, byGen, len(failed), spread(took))
	if len(failed) != 0 || byGen["1"] == 0 {
		t.Errorf("failed requests %v (answered %v), want none", failed, byGen)
	}
	u.noLoss(before)
	if j := u.waitJournal("stopped: release"); countLines(j, "stopped: release") != restarts {
		t.Errorf("journal has %d \"stopped: release\", want %d (one per restart):\n%s", countLines(j, "stopped: release"), restarts, j)
	}
	u.systemctl("stop", service)
	if n := u.show("NFileDescriptorStore"); n != "0" {
		t.Errorf("NFileDescriptorStore %s after stop, want 0", n)
	}
	if n := u.listeners(); n != 0 {
		t.Errorf("%d listeners on %d after stop, want 0 (the store released the socket)", n, boxPort)
	}
}

// spread is "median M, max X" of ds.
func spread(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("median %s, max %s", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
