package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// handover runs New for a successor and checks the predecessor's Exit fires
// on Ready; listen is called between New and Ready.
func handover(t *testing.T, old *Upgrader, cfg Config, listen func(u *Upgrader)) *Upgrader {
	t.Helper()
	u, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	listen(u)
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-old.Exit():
	case <-time.After(10 * time.Second):
		t.Fatal("predecessor's Exit not closed")
	}
	if u.Generation() != old.Generation()+1 {
		t.Fatalf("generation %d after %d", u.Generation(), old.Generation())
	}
	return u
}

// A unix listener and a UDP socket are handed over and keep working after
// the predecessor closed its copies; the unix socket file stays.
func TestUnixAndUDP(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path, sock := handoffPath(t), filepath.Join(t.TempDir(), "app.sock")
		old, err := New(ctx, Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		ul, err := old.Listen(ctx, "admin", "unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		pc, err := old.ListenPacket(ctx, "dns", "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Ready(); err != nil {
			t.Fatal(err)
		}
		var ul2 net.Listener
		var pc2 net.PacketConn
		handover(t, old, Config{Path: path}, func(u *Upgrader) {
			if ul2, err = u.Listen(ctx, "admin", "unix", sock); err != nil {
				t.Fatal(err)
			}
			if pc2, err = u.ListenPacket(ctx, "dns", "udp4", "127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
		})
		defer ul2.Close()
		defer pc2.Close()
		if pc2.LocalAddr().String() != pc.LocalAddr().String() {
			t.Fatalf("udp %s, was %s", pc2.LocalAddr(), pc.LocalAddr())
		}
		ul.Close()
		pc.Close()
		old.Close()
		if _, err := os.Stat(sock); err != nil {
			t.Fatalf("unix socket file gone after the predecessor closed: %v", err)
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sc, err := ul2.Accept()
		if err != nil {
			t.Fatal(err)
		}
		sc.Close()
		d, err := net.Dial("udp4", pc2.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		d.Write([]byte("ping"))
		pc2.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 16)
		if n, _, err := pc2.ReadFrom(buf); err != nil || string(buf[:n]) != "ping" {
			t.Fatalf("udp read %q %v", buf[:n], err)
		}
	})
}

// 1000 listeners in one handoff (4 batches): all validated, on the same
// addresses, and accepting.
func TestThousandListeners(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const n = 1000
		path := handoffPath(t)
		old := mustReady(t, Config{Path: path}, n)
		defer old.Close()
		addrs := make([]string, n)
		for i, s := range old.Table().Offer() {
			addrs[i], _ = linux.Sockname(s.FD())
		}
		lns := make([]net.Listener, n)
		handover(t, old, Config{Path: path}, func(u *Upgrader) {
			for i := range lns {
				var err error
				if lns[i], err = u.Listen(context.Background(), "l"+strconv.Itoa(i), "tcp4", "127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { lns[i].Close() })
			}
		})
		for i, ln := range lns {
			if ln.Addr().String() != addrs[i] {
				t.Fatalf("listener %d on %s, was %s", i, ln.Addr(), addrs[i])
			}
			// Inherited or fresh, a TCP listener is a *reuseport.Listener
			// that says what the kernel reports of its options.
			rl, ok := ln.(*reuseport.Listener)
			if !ok || rl.Digest().Backlog() == 0 || rl.Effective().Backlog != rl.Digest().Backlog() || rl.Socket().Cookie == 0 {
				t.Fatalf("listener %d is %T (%+v), want an inherited *reuseport.Listener with its digest", i, ln, rl)
			}
		}
		old.Close()
		for i, ln := range lns {
			c, err := net.Dial("tcp4", addrs[i])
			if err != nil {
				t.Fatal(err)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
			c.Close()
		}
	})
}

// A successor whose Config asks for other options than the inherited
// socket has fails with *reuseport.OptionMismatchError naming them, or only
// warns with WarnOnMismatch.
func TestOptionMismatch(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path := handoffPath(t)
		old := mustReady(t, Config{Path: path}, 1)
		defer old.Close()
		cfg := Config{Path: path, Listen: reuseport.Config{Options: reuseport.Options{NoDelay: true, Backlog: 16}}}
		u, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = u.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
		var mm *reuseport.OptionMismatchError
		if !errors.As(err, &mm) || len(mm.Diffs) != 2 || mm.Diffs[0].Option != "TCP_NODELAY" || mm.Diffs[1].Option != "backlog" || mm.Diffs[1].Want != "16" {
			t.Fatalf("Listen: %v, want TCP_NODELAY and backlog differing", err)
		}
		t.Logf("%v", err)
		u.Close()
		waitFailures(t, path, 1) // until then the predecessor is busy with u
		cfg.WarnOnMismatch = true
		handover(t, old, cfg, func(u *Upgrader) {
			ln, err := u.Listen(ctx, "l0", "tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		})
	})
}

// A stale socket file (its process died) is detected and replaced; an
// insecure directory is refused.
func TestStaleAndInsecurePath(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path := handoffPath(t)
		dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		dead.SetUnlinkOnClose(false)
		dead.Close()
		u := mustReady(t, Config{Path: path}, 1)
		if u.Generation() != 1 {
			t.Fatalf("generation %d", u.Generation())
		}
		if st, ok, err := Observe(ctx, path); err != nil || !ok || st.PID != os.Getpid() {
			t.Fatalf("Observe = %+v %v %v", st, ok, err)
		}
		u.Close()
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("socket file left after Close: %v", err)
		}
		dir := t.TempDir()
		os.Chmod(dir, 0o777)
		_, err = New(ctx, Config{Path: dir + "/h.sock"})
		var ie *InsecurePathError
		if !errors.As(err, &ie) || !errors.Is(err, ErrInsecurePath) || ie.Dir != dir {
			t.Fatalf("New in a 0777 directory: %v", err)
		}
		t.Logf("%v", err)
	})
}

// waitFailures waits (bounded) until the server on path counts n failures.
func waitFailures(t *testing.T, path string, n uint64) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if st, ok, err := Observe(context.Background(), path); err == nil && ok && st.Failures >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("server on %s did not count %d failures in 5 s", path, n)
}

// An abstract handoff name: the successor binds it once the predecessor let
// go, and serves it for the next one.
func TestAbstractName(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := Config{Path: "@zerodrop-test-abstract-" + strconv.Itoa(os.Getpid())}
		g1 := mustReady(t, cfg, 1)
		defer g1.Close()
		listenL0 := func(u *Upgrader) {
			ln, err := u.Listen(context.Background(), "l0", "tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		}
		g2 := handover(t, g1, cfg, listenL0)
		g1.Close()
		g3 := handover(t, g2, cfg, listenL0)
		if g3.Generation() != 3 {
			t.Fatalf("generation %d, want 3", g3.Generation())
		}
		if err := g3.Ready(); err == nil {
			t.Fatal("second Ready succeeded")
		}
	})
}
