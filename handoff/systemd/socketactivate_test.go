package systemd

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

// freePort returns a loopback port nothing listens on (the test's namespace
// is private, so nobody takes it before the test does).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// listenerOn waits (bounded) for exactly one listener on port and returns it
// with the pids that hold it.
func listenerOn(t *testing.T, port int) (sockdiag.Listener, []int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ls, err := sockdiag.Listeners(uint16(port))
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			owners, _, err := sockdiag.Owners([]uint64{ls[0].Inode})
			if err != nil {
				t.Fatal(err)
			}
			var pids []int
			for _, p := range owners[ls[0].Inode] {
				pids = append(pids, p.PID)
			}
			return ls[0], pids
		}
		if len(ls) > 1 || time.Now().After(deadline) {
			t.Fatalf("listeners on port %d: %+v, want exactly one", port, ls)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSocketActivate runs the serve helper under Debian's systemd-socket-activate
// with --fdname=http: the activator binds, and on the first connection execs
// the helper in its own process with LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES.
func TestSocketActivate(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin, err := exec.LookPath("systemd-socket-activate")
		if err != nil {
			t.Fatalf("this test needs systemd-socket-activate (apt-get install systemd; .ci/run does): %v", err)
		}
		port := freePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		p := netnstest.StartHelper(t, "serve", netnstest.HelperOptions{Setup: func(cmd *exec.Cmd) {
			cmd.Path = bin
			cmd.Args = []string{bin, "--listen=" + addr, "--fdname=http",
				"-E", "ZERODROP_TEST_HELPER=serve", "-E", envGen + "=1", os.Args[0], "-test.run=^$"}
		}})
		bound, holders := listenerOn(t, port)
		pid := p.Cmd.Process.Pid
		if len(holders) != 1 || holders[0] != pid {
			t.Fatalf("listener %d held by %v, want the activator %d", bound.Inode, holders, pid)
		}

		// The first connection makes the activator exec the helper in place.
		reply := request(t, addr)
		out := readerOf(p)
		var ino uint64
		var gotPID int
		var diffs string
		if _, err := fmt.Sscanf(out.next(t), "ready %d %d %s", &ino, &gotPID, &diffs); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("gen=1 inode=%d pid=%d", bound.Inode, pid)
		if ino != bound.Inode || gotPID != pid || reply != want {
			t.Fatalf("helper took inode %d in pid %d and replied %q; activator bound inode %d in pid %d (want reply %q)",
				ino, gotPID, reply, bound.Inode, pid, want)
		}
		// systemd-socket-activate sets SO_REUSEADDR but not SO_REUSEPORT;
		// CheckOptions names exactly that difference from reuseport's defaults.
		if diffs != "SO_REUSEPORT:1->0," {
			t.Fatalf("option differences from reuseport defaults: %q", diffs)
		}
		if got := request(t, addr); got != want {
			t.Fatalf("second request: %q, want %q", got, want)
		}
		if after, holders := listenerOn(t, port); after.Inode != bound.Inode || len(holders) != 1 || holders[0] != pid {
			t.Fatalf("after serving: listener %d held by %v", after.Inode, holders)
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("helper exit: %v", err)
		}
	})
}
