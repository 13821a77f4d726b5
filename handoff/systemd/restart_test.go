package systemd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestRestartThroughFDStore plays systemd around a restart, with
// tcp_migrate_req=0 (nothing but the stored fd keeps the queue): generation A
// stores its listener (FDSTORE=1), 20 clients queue while A stops, and B is
// started the way systemd starts a service whose fd store is not empty: the
// stored fd as fd 3, LISTEN_FDS=1, LISTEN_FDNAMES=http and LISTEN_PID set to
// B's pid. systemd sets LISTEN_PID between fork and exec; here the
// listen-pid-exec helper does the same (it sets LISTEN_PID to its own pid
// and execs B, keeping pid and fds), so B's Activated reads a real environment.
func TestRestartThroughFDStore(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		sd := netnstest.ListenNotify(t, filepath.Join(t.TempDir(), "notify"))
		notify := EnvNotifySocket + "=" + sd.Addr
		stdinR, stdinW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer stdinW.Close()
		a := netnstest.StartHelper(t, "store-and-stop", netnstest.HelperOptions{Env: []string{notify}, Stdin: stdinR})
		stdinR.Close()

		msg, stored := sd.Recv(t)
		if msg != "FDSTORE=1\nFDNAME=http" || len(stored) != 1 {
			t.Fatalf("A sent %q with %d fds, want FDSTORE=1 with 1 fd", msg, len(stored))
		}
		sd.Expect(t, "READY=1\nSTATUS=generation 1 serving")
		var addr string
		var ino uint64
		aOut := readerOf(a)
		if _, err := fmt.Sscanf(aOut.next(t), "ready %s %d", &addr, &ino); err != nil {
			t.Fatal(err)
		}
		if got := inodeOf(stored[0]); got != ino {
			t.Fatalf("stored fd has inode %d, A's listener %d", got, ino)
		}
		if got, want := request(t, addr), fmt.Sprintf("gen=1 inode=%d pid=%d", ino, a.Cmd.Process.Pid); got != want {
			t.Fatalf("A replied %q, want %q", got, want)
		}

		counters := netnstest.Snapshot(t)
		must(t, a.Signal(syscall.SIGTERM))
		sd.Expect(t, "STOPPING=1\nSTATUS=generation 1 draining")
		if got := aOut.next(t); got != "stopped" {
			t.Fatalf("A said %q, want stopped", got)
		}
		clients := netnstest.Queue(t, addr, 20, netnstest.ClientOptions{})
		stdinW.Close() // A exits
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Wait(ctx); err != nil {
			t.Fatalf("A: %v", err)
		}
		port, _ := strconv.Atoi(addr[len("127.0.0.1:"):])
		l, holders := listenerOn(t, port)
		if l.Inode != ino || l.Queue != 20 || len(holders) != 1 || holders[0] != os.Getpid() {
			t.Fatalf("with A gone: listener inode %d, queue %d, held by %v; want inode %d, queue 20, held by the test (pid %d) alone",
				l.Inode, l.Queue, holders, ino, os.Getpid())
		}

		b := netnstest.StartHelper(t, "listen-pid-exec", netnstest.HelperOptions{
			ExtraFiles: stored,
			Env: []string{notify, EnvListenFDs + "=1", EnvListenFDNames + "=http",
				envNext + "=serve", envGen + "=2", envCfg + "=1"},
		})
		sd.Expect(t, "READY=1\nSTATUS=generation 2 serving")
		if got, want := readerOf(b).next(t), fmt.Sprintf("ready %d %d -", ino, b.Cmd.Process.Pid); got != want {
			t.Fatalf("B said %q, want %q", got, want)
		}
		tally := clients.Await(20 * time.Second)
		want := fmt.Sprintf("gen=2 inode=%d pid=%d\n", ino, b.Cmd.Process.Pid)
		for i, c := range clients.List {
			if c.Outcome != netnstest.Answered || string(c.Reply) != want {
				t.Errorf("client %d: %v %q (%v), want %q", i, c.Outcome, c.Reply, c.Err, want)
			}
		}
		if tally[netnstest.Answered] != 20 {
			t.Fatalf("tally %v, want 20 answered", tally)
		}
		if d := counters.Delta(t, "Tcp.OutRsts", "Tcp.EstabResets"); d["Tcp.OutRsts"] != 0 || d["Tcp.EstabResets"] != 0 {
			t.Fatalf("counters %v, want no reset", d)
		}
		must(t, b.Signal(syscall.SIGTERM))
		if err := b.Wait(ctx); err != nil {
			t.Fatalf("B: %v", err)
		}
	})
}
