package handoff

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// The successor is SIGKILLed holding the fds, before Ready: the predecessor
// keeps serving without a failed request, Upgrade reports the failure with
// its reason, and a later handoff succeeds.
func TestSuccessorKilledBeforeReady(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		old := startApp(t, path)
		addr := old.expect(t, "ready")[3]
		ld := startLoad(t, addr, 4)
		ld.waitAnswers(t, 50)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		_, err := Upgrade(ctx, path, func() error {
			doomed := startApp(t, path, envMode+"=hold")
			doomed.expect(t, "received")
			ld.waitAnswers(t, 50)
			doomed.Kill()
			return nil
		})
		var ue *UpgradeError
		if !errors.As(err, &ue) || ue.Generation != 1 || ue.Reason == "" {
			t.Fatalf("Upgrade = %v, want *UpgradeError for generation 1 with a reason", err)
		}
		t.Logf("reported: %v", err)
		ld.waitAnswers(t, 200)
		next := startApp(t, path)
		if f := next.expect(t, "ready"); f[1] != "2" || f[3] != addr {
			t.Fatalf("later successor reports %v", f)
		}
		if f := old.expect(t, "exit"); f[1] != f[2] {
			t.Fatalf("old exits with %s fds, started with %s", f[1], f[2])
		}
		ld.waitAnswers(t, 50)
		ld.end()
		ok, errs, _ := ld.snapshot()
		t.Logf("%d requests answered, %d failed", ok, len(errs))
		if len(errs) != 0 {
			t.Fatalf("%d failed requests, first: %v", len(errs), errs[0])
		}
	})
}

// The predecessor is SIGKILLed after its first batch of fds: New keeps the
// sockets of that batch (live kernel sockets: clients queue on them while no
// process accepts), Listen returns them as inherited and creates the others
// fresh. Clients of "http", in the first batch, connect from the kill on:
// their connections wait in its queue until the successor serves, and none
// is refused or reset.
func TestPredecessorKilledMidTransfer(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		old := startApp(t, path, envMode+"=pause", envN+"=300")
		f := old.expect(t, "ready")
		addr := f[3]
		ino := inodeOf(t, atoi(f[2]), addr)
		ctx := context.Background()
		type result struct {
			u   *Upgrader
			err error
		}
		done := make(chan result, 1)
		go func() {
			u, err := New(ctx, Config{Path: path})
			done <- result{u, err}
		}()
		old.expect(t, "paused")
		old.Kill()
		ld := startLoad(t, addr, 4)
		var r result
		select {
		case r = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("New did not return 30 s after the predecessor died")
		}
		if r.err != nil {
			t.Fatalf("New: %v", r.err)
		}
		defer r.u.Close()
		if fb := r.u.FallbackReason(); fb == nil || !predecessorGone(fb) {
			t.Fatalf("FallbackReason = %v, want the lost connection", fb)
		}
		waitQueued(t, addr) // nobody accepts yet: the clients wait in the kept socket's queue
		if g := r.u.Generation(); g != 2 {
			t.Errorf("Generation = %d, want 2: the sockets of generation 1 go on", g)
		}
		ln, err := r.u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if _, same := ln.(*reuseport.Listener); !same || ln.Addr().String() != addr {
			t.Fatalf("http: %T on %s, want the inherited socket on %s", ln, ln.Addr(), addr)
		}
		if got := listenerInode(t, ln); got != ino {
			t.Errorf("http: inode %d, the predecessor's is %d", got, ino)
		}
		// x299 was in no batch the predecessor sent: it is created fresh.
		x, err := r.u.Listen(ctx, "x299", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if _, fresh := x.(*reuseport.Listener); !fresh {
			t.Errorf("x299: %T, want a fresh *reuseport.Listener", x)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); acceptLoop(ln, r.u.Generation(), &wg) }()
		if err := r.u.Ready(); err != nil {
			t.Fatal(err)
		}
		ld.waitAnswers(t, 200)
		ld.end()
		ln.Close()
		wg.Wait()
		ok, errs, maxGen := ld.snapshot()
		t.Logf("%d requests answered, %d failed, last generation %d", ok, len(errs), maxGen)
		if len(errs) != 0 {
			t.Fatalf("%d failed requests, first: %v", len(errs), errs[0])
		}
		if maxGen != 2 {
			t.Errorf("last answer from generation %d, want 2", maxGen)
		}
		if st, ok, err := Observe(ctx, path); err != nil || !ok || st.Generation != r.u.Generation() {
			t.Fatalf("Observe = %+v %v %v", st, ok, err)
		}
	})
}

// serveOnce makes one request to ln and serves it.
func serveOnce(t *testing.T, ln net.Listener, gen uint64) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		g, err := request(ln.Addr().String())
		if err == nil && g != gen {
			err = errors.New("answered by generation " + strconv.FormatUint(g, 10))
		}
		errc <- err
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("gen " + strconv.FormatUint(gen, 10) + "\n"))
	c.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// Two successors at once: exactly one wins, the other is told
// ErrHandoffInProgress.
func TestTwoSuccessors(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path := handoffPath(t)
		old := mustReady(t, Config{Path: path}, 1)
		defer old.Close()
		hold, release := make(chan int, 1), make(chan struct{})
		hook := func(first int) { hold <- first; <-release }
		testHookBatchSent.Store(&hook)
		defer testHookBatchSent.Store(nil)
		type result struct {
			u   *Upgrader
			err error
		}
		first := make(chan result, 1)
		go func() { u, err := New(ctx, Config{Path: path}); first <- result{u, err} }()
		<-hold // the first successor is mid-transfer
		_, err := New(ctx, Config{Path: path})
		close(release)
		if !errors.Is(err, ErrHandoffInProgress) {
			t.Fatalf("second successor: %v, want ErrHandoffInProgress", err)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "handoff" || oe.Addr.String() != path {
			t.Fatalf("error %#v, want *net.OpError handoff %s", err, path)
		}
		t.Logf("second successor: %v", err)
		r := <-first
		if r.err != nil {
			t.Fatalf("first successor: %v", r.err)
		}
		defer r.u.Close()
		ln, err := r.u.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := r.u.Ready(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.Exit():
		case <-time.After(10 * time.Second):
			t.Fatal("predecessor's Exit not closed")
		}
		if r.u.Generation() != 2 {
			t.Fatalf("generation %d, want 2", r.u.Generation())
		}
	})
}

// mustReady starts a generation with n TCP listeners "l0".. and calls Ready.
func mustReady(t *testing.T, cfg Config, n int) *Upgrader {
	t.Helper()
	ctx := context.Background()
	u, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		ln, err := u.Listen(ctx, "l"+strconv.Itoa(i), "tcp4", "127.0.0.1:0")
		if err != nil {
			u.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
	}
	if err := u.Ready(); err != nil {
		u.Close()
		t.Fatal(err)
	}
	return u
}

// Sources in order: systemd socket activation when there is no predecessor,
// then the predecessor even when the successor could use systemd's.
func TestSystemdThenPredecessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		l, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		f, err := l.File()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		path := handoffPath(t)
		p := netnstest.StartHelper(t, "app", netnstest.HelperOptions{ExtraFiles: []*os.File{f},
			Env: []string{envPath + "=" + path, envSystemd + "=1", envAddr + "=" + addr}})
		f.Close()
		first := &appProc{Proc: p, lines: lines(p.Stdout)}
		if r := first.expect(t, "ready"); r[1] != "1" || r[3] != addr {
			t.Fatalf("activated process reports %v", r)
		}
		if g, err := request(addr); err != nil || g != 1 {
			t.Fatalf("request to the activated socket: generation %d, %v", g, err)
		}
		next := startApp(t, path, envAddr+"="+addr)
		if r := next.expect(t, "ready"); r[1] != "2" || r[3] != addr {
			t.Fatalf("successor reports %v", r)
		}
		// It started with systemd's fd 3 too, and closed it with its listener.
		if r := first.expect(t, "exit"); r[1] != strconv.Itoa(atoi(r[2])-1) {
			t.Fatalf("activated process exits with %s fds, started with %s (fd 3 included)", r[1], r[2])
		}
		if g, err := request(addr); err != nil || g != 2 {
			t.Fatalf("request after the handoff: generation %d, %v", g, err)
		}
	})
}

func atoi(s string) int { n, _ := strconv.Atoi(s); return n }

// inodeOf is the inode of the one TCP listener on addr in this namespace
// (pid only names its holder in a failure message).
func inodeOf(t *testing.T, pid int, addr string) uint64 {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	ls, err := sockdiag.Listeners(ap.Port())
	if err != nil || len(ls) != 1 {
		t.Fatalf("listeners on %s (pid %d): %+v %v, want one", addr, pid, ls, err)
	}
	return ls[0].Inode
}

// waitQueued waits (bounded) until the listener on addr has a connection in
// its accept queue.
func waitQueued(t *testing.T, addr string) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	for range 2000 {
		ls, err := sockdiag.Listeners(ap.Port())
		if err != nil || len(ls) != 1 {
			t.Fatalf("listeners on %s: %+v %v, want one", addr, ls, err)
		}
		if ls[0].Queue > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no connection queued on %s in 10 s", addr)
}

// listenerInode is the inode of ln's socket, by fstat.
func listenerInode(t *testing.T, ln net.Listener) uint64 {
	t.Helper()
	var st unix.Stat_t
	err := linux.Control(ln.(syscall.Conn), func(fd int) error { return unix.Fstat(fd, &st) })
	if err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
