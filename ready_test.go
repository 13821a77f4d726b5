package zerodrop_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
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

// TestServeStopDuringHandoff: a stop signal that reaches the old generation
// while its successor takes over (sent by the successor itself, once it has
// the listeners and the old generation waits for its ready, or right after
// its Ready returned, as a deploy tool that stops the old generation once the
// new one reports ready) must wait for that handoff and hand the keep-alive
// connections over: every old generation reports "successor ready", no
// connection is closed by a server, and no request fails.
func TestServeStopDuringHandoff(t *testing.T) {
	const clients, restarts = 64, 5
	for _, point := range []string{"listen", "serving"} {
		t.Run(point, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				bin := netnstest.ExecutableCopy(t)
				addr := "127.0.0.1:8080"
				env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"), "ZD_ADDR=" + addr,
					"ZD_TERM_PRED=" + point}
				s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
				pid := servingPID(t, s.Expect(t, "serving 1 "))
				p := startKAPool(t, "http://"+addr+"/", clients)
				p.waitFor(t, pid, 2*clients)
				handedOver := 0
				for gen := 2; gen <= restarts+1; gen++ {
					if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
						t.Fatal(err)
					}
					next := servingPID(t, s.Expect(t, "serving "+strconv.Itoa(gen)+" "))
					rep := strings.Fields(s.Expect(t, "report "+strconv.Itoa(gen-1)+" "))
					if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
						t.Errorf("generation %d exited with %v", gen-1, ws)
					}
					if rep[2] != "successor_ready" {
						t.Errorf("generation %d stopped with %v, want successor_ready: the stop signal raced the handoff", gen-1, rep[2:])
					}
					n, _ := strconv.Atoi(rep[6])
					handedOver += n
					pid = next
					p.waitFor(t, pid, clients)
				}
				failed, byClass, first := p.stop()
				if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				s.Expect(t, "report "+strconv.Itoa(restarts+1)+" ")
				s.Reap(t, pid, 30*time.Second)
				t.Logf("%d restarts: %d failed %v (first: %v); %d dials, %d closed by the server, %d by the clients; %d handed over",
					restarts, failed, byClass, first, p.dials.Load(), p.serverClosed.Load(), p.clientClosed.Load(), handedOver)
				if failed > 0 || p.serverClosed.Load() != 0 {
					t.Errorf("%d requests failed (first: %v), %d connections closed by the server; want 0 and 0", failed, first, p.serverClosed.Load())
				}
				if want := clients*restarts - int(p.clientClosed.Load()); handedOver < want {
					t.Errorf("%d connections handed over, want at least %d", handedOver, want)
				}
			})
		})
	}
}

// TestServeNamespaceInit: generation 1 is PID 1 of a PID namespace of its
// own (a container's main process). SIGHUP starts generation 2 as its child
// (CLONE_PARENT cannot work there), which takes over; generation 1 must not
// exit after its drain, since the kernel would then kill generation 2 with
// the rest of the namespace: it stays the namespace's init, and generation 2
// answers every request. A SIGTERM to generation 1 then reaches generation 2,
// which drains, and both exit (generation 1's Serve returns last). Before, generation 2 died with generation 1:
// 0 of 20 answered.
func TestServeNamespaceInit(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:8080"
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), "ZERODROP_TEST_HELPER=generation", "ZD_SOCK="+filepath.Join(t.TempDir(), "handoff.sock"), "ZD_ADDR="+addr)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Pdeathsig: syscall.SIGKILL}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		var werr error
		go func() { werr = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			cmd.Process.Kill() // the namespace's init: the kernel ends the rest
			<-exited
		})
		lines := netnstest.ReadLines(out)
		if got := lines.Expect(t, "serving"); got[1] != "1" || got[2] != "1" {
			t.Fatalf("generation %s serving as pid %s, want generation 1 as pid 1 of its namespace", got[1], got[2])
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pid2, err := strconv.Atoi(lines.Expect(t, "serving")[2]) // its pid in the namespace
		if err != nil {
			t.Fatal(err)
		}
		// Generation 1 answers until its drain released the socket: then
		// generation 2 answers everything.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		run, last := 0, ""
		for deadline := time.Now().Add(30 * time.Second); run < 20 && time.Now().Before(deadline); {
			got, _, err := get(c, "http://"+addr+"/")
			if err == nil && got == pid2 {
				run++
				continue
			}
			run, last = 0, fmt.Sprintf("pid %d, %v", got, err)
		}
		if run < 20 {
			t.Fatalf("generation 2 (pid %d) never answered 20 requests in a row within 30 s (last other answer: %s)", pid2, last)
		}
		select {
		case <-exited:
			t.Fatalf("generation 1, the namespace's init, exited after the handoff: %v", werr)
		default:
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if rep := lines.Expect(t, "report"); rep[1] != "2" || rep[2] != "terminated" {
			t.Errorf("generation 2 reported %v, want terminated", rep[1:])
		}
		// Serve returns in generation 1 once it is the last process.
		if rep := lines.Expect(t, "report"); rep[1] != "1" || rep[2] != "successor_ready" {
			t.Errorf("generation 1 reported %v, want successor_ready", rep[1:])
		}
		select {
		case <-exited:
			if werr != nil {
				t.Errorf("generation 1: %v", werr)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("generation 1 did not exit within 30 s of its successor's stop")
		}
	})
}
