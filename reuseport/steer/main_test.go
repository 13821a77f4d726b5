package steer_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("worker", workerMain)
	netnstest.RegisterHelper("as-nobody", asNobody)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// pins lists the files under dir (pins and directories).
func pins(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && !strings.HasSuffix(p, ".debug") { // maps.debug, progs.debug: the kernel's
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// listen opens a reuseport listener on addr, closed at cleanup.
func listen(tb testing.TB, addr string, o reuseport.Options) *reuseport.Listener {
	tb.Helper()
	c := reuseport.Config{Options: o, Migration: reuseport.MigrationIgnore}
	l, err := c.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	return l
}

// join registers l, with the member closed at cleanup.
func join(tb testing.TB, c *steer.Config, l *reuseport.Listener) *steer.Member {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.Join(ctx, l)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// open opens the group of addr as an observer, closed at cleanup.
func open(tb testing.TB, c *steer.Config, addr string) *steer.Group {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.Open(ctx, addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close() })
	return g
}

// acceptN accepts n connections from l within timeout, reads each one's
// first line and answers it; it returns what the clients sent.
func acceptN(tb testing.TB, l *reuseport.Listener, n int, timeout time.Duration) []string {
	tb.Helper()
	var got []string
	l.SetDeadline(time.Now().Add(timeout))
	defer l.SetDeadline(time.Time{})
	for range n {
		c, err := l.Accept()
		if err != nil {
			tb.Fatalf("accept %d of %d: %v", len(got)+1, n, err)
		}
		c.SetReadDeadline(time.Now().Add(timeout))
		buf := make([]byte, 64)
		k, err := c.Read(buf)
		if err != nil {
			c.Close()
			tb.Fatalf("read from accepted connection: %v", err)
		}
		got = append(got, string(buf[:k]))
		c.Write([]byte("ok\n"))
		c.Close()
	}
	return got
}

// queued reports l's accept-queue length.
func queued(tb testing.TB, l *reuseport.Listener) int {
	tb.Helper()
	q, err := l.Queue()
	if err != nil {
		tb.Fatal(err)
	}
	return int(q.Len)
}

// isOp checks err is a *net.OpError with the op.
func isOp(tb testing.TB, err error, op string) {
	tb.Helper()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != op || oe.Addr == nil {
		tb.Fatalf("error %v (%T), want *net.OpError with Op %q and an address", err, err, op)
	}
	if n := strings.Count(err.Error(), op+" tcp "); n != 1 || errors.As(oe.Err, new(*net.OpError)) {
		tb.Fatalf("error %q names the operation %d times, want once", err, n)
	}
}
