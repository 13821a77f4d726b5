package zerodrop_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestServeUnreadySuccessor: generation 1 runs as nobody and is not dumpable
// (as a setcap binary is); generation 2, started by its SIGHUP, inherits the
// listener, then its Ready fails before generation 1 was told anything (the
// PID file's directory is gone) and Serve drains it ("ready failed").
// Generation 2 cannot read generation 1's fds, so only the fact that it
// received the socket from a predecessor tells it the socket is shared: its
// drain must release it, and generation 1 must answer every request after
// generation 2 exited. It answered none before the fix: generation 2's drain
// shut the socket down under it.
func TestServeUnreadySuccessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		run := ownedDir(t, 65534)
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_SOCK=@zd-unready-" + strconv.Itoa(os.Getpid()), "ZD_ADDR=" + addr,
			"ZD_UID=65534", "ZD_NODUMP=1", "ZD_PIDFILE=" + filepath.Join(run, "pid"), "ZD_BREAK_PIDFILE=1"}
		s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
		pid1 := servingPID(t, s.Expect(t, "serving 1 "))
		if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		rep2 := strings.Fields(s.Expect(t, "report 2 "))
		errLine := s.Expect(t, "error ")
		t.Logf("generation 2: %v; %s", rep2[2:], errLine)
		if rep2[2] != "ready_failed" || rep2[3] != string(drain.MethodRelease) {
			t.Errorf("generation 2 stopped with %v, want ready_failed and %s", rep2[2:], drain.MethodRelease)
		}
		answeredBy(t, "http://"+addr+"/", pid1, 20)
		if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rep1 := strings.Fields(s.Expect(t, "report 1 "))
		if ws := s.Reap(t, pid1, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 1 exited with %v", ws)
		}
		if rep1[2] != "terminated" {
			t.Errorf("generation 1 stopped with %v, want terminated", rep1[2:])
		}
	})
}

// TestServeNotifyFailsAfterHandoff: generation 2 runs under a notify socket
// (as systemd's) that is gone by the time it tells systemd it is the main
// process: the predecessor was already told to stop, so the failed MAINPID=
// and READY=1 must not stop generation 2 too. It serves, and answers every
// request after generation 1 exited. Before the fix, Serve reported "ready
// failed" and drained: both generations exited, 0 of 20 answered.
func TestServeNotifyFailsAfterHandoff(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		ns := netnstest.ListenNotify(t, "@zd-notify-"+strconv.Itoa(os.Getpid()))
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"), "ZD_ADDR=" + addr,
			"NOTIFY_SOCKET=" + ns.Addr}
		s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
		pid1 := servingPID(t, s.Expect(t, "serving 1 "))
		if got, _ := ns.Recv(t); !strings.HasPrefix(got, "READY=1") {
			t.Fatalf("generation 1 notified %q, want READY=1", got)
		}
		ns.Close() // systemd is gone
		if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pid2 := servingPID(t, s.Expect(t, "serving 2 "))
		rep1 := strings.Fields(s.Expect(t, "report 1 "))
		if ws := s.Reap(t, pid1, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 1 exited with %v", ws)
		}
		if rep1[2] != "successor_ready" {
			t.Errorf("generation 1 stopped with %v, want successor_ready", rep1[2:])
		}
		answeredBy(t, "http://"+addr+"/", pid2, 20)
		if err := syscall.Kill(pid2, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		s.Expect(t, "report 2 ")
		if ws := s.Reap(t, pid2, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 2 exited with %v", ws)
		}
	})
}

// answeredBy sends n requests, each on a new connection, and fails unless
// the process pid answered every one.
func answeredBy(t *testing.T, url string, pid, n int) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	answered := 0
	for i := range n {
		got, _, err := get(c, url)
		if err != nil || got != pid {
			t.Errorf("request %d: answered by pid %d, %v; want pid %d", i, got, err, pid)
			continue
		}
		answered++
	}
	if answered != n {
		t.Errorf("pid %d answered %d of %d requests", pid, answered, n)
	}
}

// ownedDir returns a new directory owned by uid (mode 0700) inside a sticky,
// world-writable one (as /tmp is), so that uid may remove it.
func ownedDir(t *testing.T, uid int) string {
	t.Helper()
	top, err := os.MkdirTemp("", "zd-owned-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(top) })
	if err := os.Chmod(top, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(top, "run")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir
}
