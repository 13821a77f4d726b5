package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// stallingPredecessor accepts connections on path and never answers, until
// the test ends.
func stallingPredecessor(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var held []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
}

// TestNewHonoursContext: a predecessor that accepts and then says nothing
// holds New only until New's ctx ends, not for Config.Timeout; the error
// wraps the ctx's.
func TestNewHonoursContext(t *testing.T) {
	if l, err := net.Listen("unix", handoffPath(t)); err == nil { // open the netpoller's fds before counting
		l.Close()
	}
	netnstest.CheckLeaks(t)
	path := handoffPath(t)
	stallingPredecessor(t, path)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			const timeout = time.Minute
			start := time.Now()
			u, err := New(ctx, Config{Path: path, Timeout: timeout})
			took := time.Since(start)
			if u != nil {
				u.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("New = %v after %v, want an error wrapping %v", err, took, tc.want)
			}
			// Far below Timeout: New waited for ctx, not for the protocol's timeout.
			if took > timeout/2 {
				t.Fatalf("New returned after %v, Timeout is %v", took, timeout)
			}
			t.Logf("New returned after %v: %v", took, err)
		})
	}
}

// TestRetryAfterClose: a successor that closes its Upgrader before Ready
// frees the predecessor's handoff slot before Close returns, so that an
// immediate retry is served, not told ErrHandoffInProgress. 50 rounds against
// one predecessor process, which keeps serving throughout.
func TestRetryAfterClose(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		old := startApp(t, path)
		addr := old.expect(t, "ready")[3]
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		for i := range 50 {
			u, err := New(ctx, Config{Path: path})
			if err != nil {
				t.Fatalf("round %d: New: %v", i, err)
			}
			if g := u.Generation(); g != 2 {
				u.Close()
				t.Fatalf("round %d: generation %d, want 2", i, g)
			}
			if err := u.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", i, err)
			}
		}
		if g, err := request(addr); err != nil || g != 1 {
			t.Fatalf("predecessor after 50 aborted handoffs: generation %d, %v", g, err)
		}
	})
}

// TestPathChecks: paths that cannot work, or that name something other than
// a socket, fail in New with a typed error, before anything is bound, and
// what the user has at the path is left as it was.
func TestPathChecks(t *testing.T) {
	netnstest.CheckLeaks(t)
	ctx := context.Background()
	dir := t.TempDir()
	mk := func(name string, make func(string) error) string {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := mk("file", func(p string) error { return os.WriteFile(p, []byte("precious\n"), 0o600) })
	sub := mk("dir", func(p string) error { return os.Mkdir(p, 0o700) })
	link := mk("link", func(p string) error { return os.Symlink(file, p) })
	long := filepath.Join(dir, strings.Repeat("l", 107-len(dir)-1)) // fits sun_path; its temporary name does not
	for _, tc := range []struct{ name, path string }{
		{"empty", ""},
		{"abstract without a name", "@"},
		{"abstract name too long", "@" + strings.Repeat("a", 108)},
		{"temporary name too long", long},
		{"a regular file", file},
		{"a directory", sub},
		{"a symlink", link},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := New(ctx, Config{Path: tc.path})
			if u != nil {
				u.Close()
			}
			var pe *PathError
			var oe *net.OpError
			if !errors.Is(err, ErrBadPath) || !errors.As(err, &pe) || pe.Path != tc.path || !errors.As(err, &oe) || oe.Op != "handoff" {
				t.Fatalf("New(%q) = %v, want a *net.OpError wrapping a *PathError (ErrBadPath)", tc.path, err)
			}
			t.Log(err)
		})
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "precious\n" {
		t.Errorf("the regular file at the path: %q, %v", b, err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink at the path: %v, %v", fi, err)
	}
	if fi, err := os.Stat(sub); err != nil || !fi.IsDir() {
		t.Errorf("the directory at the path: %v, %v", fi, err)
	}
}

// TestAncestorChecks: a private directory inside one that others may write
// to (without the sticky bit) is no safer than that one: they can rename it
// away and put their own in its place. A sticky ancestor, like /tmp, is fine.
func TestAncestorChecks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o777, false}, {0o775, false}, {0o777 | os.ModeSticky, true}, {0o755, true}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			open := filepath.Join(t.TempDir(), "open")
			private := filepath.Join(open, "private")
			if err := os.MkdirAll(private, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(open, tc.mode); err != nil {
				t.Fatal(err)
			}
			u, err := New(ctx, Config{Path: filepath.Join(private, "h.sock")})
			if tc.ok {
				if err != nil {
					t.Fatalf("New under a %v ancestor: %v", tc.mode, err)
				}
				u.Close()
				return
			}
			if u != nil {
				u.Close()
			}
			var ie *InsecurePathError
			if !errors.As(err, &ie) || ie.Dir != open {
				t.Fatalf("New under a %v ancestor: %v, want an *InsecurePathError naming %s", tc.mode, err, open)
			}
			t.Log(err)
		})
	}
}

// TestPIDFileNoFollow: a symlink planted at the PID file's temporary name is
// not followed: Ready fails with ErrBadPath before it tells the predecessor
// anything, the link's target keeps its content, and the predecessor process
// keeps serving. A PID file in a directory others may write to is refused
// by New.
func TestPIDFileNoFollow(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path := handoffPath(t)
		old := startApp(t, path)
		addr := old.expect(t, "ready")[3]
		dir := t.TempDir()
		victim := filepath.Join(dir, "victim")
		if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		pidFile := filepath.Join(dir, "app.pid")
		if err := os.Symlink(victim, pidFile+"."+strconv.Itoa(os.Getpid())+".tmp"); err != nil {
			t.Fatal(err)
		}
		u, err := New(ctx, Config{Path: path, PIDFile: pidFile})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		ln, err := u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		err = u.Ready()
		var pe *PathError
		if !errors.Is(err, ErrBadPath) || !errors.As(err, &pe) {
			t.Errorf("Ready with a symlink at the PID file's temporary name: %v, want ErrBadPath", err)
		}
		if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
			t.Errorf("the symlink's target now holds %q (%v)", b, err)
		}
		if _, err := os.Lstat(pidFile); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("PID file created: %v", err)
		}
		select {
		case <-u.Exit():
		default:
		}
		if old.Exited() {
			t.Fatal("the predecessor exited")
		}
		if g, err := request(addr); err != nil || g != 1 {
			t.Fatalf("predecessor after the failed Ready: generation %d, %v", g, err)
		}
		open := t.TempDir()
		if err := os.Chmod(open, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err = New(ctx, Config{Path: filepath.Join(t.TempDir(), "h.sock"), PIDFile: filepath.Join(open, "app.pid")})
		var ie *InsecurePathError
		if !errors.As(err, &ie) || ie.Dir != open {
			t.Errorf("New with a PID file in a 0777 directory: %v, want an *InsecurePathError naming it", err)
		}
	})
}

// TestListenUnixKeepsFiles: Listen("unix", p) replaces only a stale socket
// file (one whose connect is refused). A regular file, a directory or a
// symlink at p is left as it was, with a *PathError naming p.
func TestListenUnixKeepsFiles(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		dir := t.TempDir()
		file := filepath.Join(dir, "data")
		if err := os.WriteFile(file, []byte("precious\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "link")
		if err := os.Symlink(file, link); err != nil {
			t.Fatal(err)
		}
		stale := filepath.Join(dir, "stale.sock")
		sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		sl.SetUnlinkOnClose(false)
		sl.Close()
		u, err := New(ctx, Config{Path: filepath.Join(t.TempDir(), "h.sock")})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		for _, p := range []string{file, link, dir} {
			ln, err := u.Listen(ctx, "u-"+filepath.Base(p), "unix", p)
			if ln != nil {
				ln.Close()
			}
			var pe *PathError
			if !errors.Is(err, ErrBadPath) || !errors.As(err, &pe) || pe.Path != p {
				t.Errorf("Listen(unix, %s) = %v, want a *PathError naming it", p, err)
			}
		}
		if b, err := os.ReadFile(file); err != nil || string(b) != "precious\n" {
			t.Errorf("regular file at the path: %q, %v", b, err)
		}
		if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("symlink at the path: %v, %v", fi, err)
		}
		ln, err := u.Listen(ctx, "stale", "unix", stale)
		if err != nil {
			t.Fatalf("Listen over a stale socket file: %v", err)
		}
		ln.Close()
	})
}
