package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// flood fills the backlog of the unix socket listening on name with
// non-blocking connects nobody accepts, until connect fails with EAGAIN
// (at most 10,000). The sockets are closed when the test ends.
func flood(t *testing.T, name string) int {
	t.Helper()
	var fds []int
	t.Cleanup(func() { closeFDs(fds) })
	for range 10_000 {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(os.NewSyscallError("socket", err))
		}
		fds = append(fds, fd)
		err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
		if errors.Is(err, unix.EAGAIN) {
			return len(fds) - 1
		}
		if err != nil {
			t.Fatal(os.NewSyscallError("connect", err))
		}
	}
	t.Fatalf("the backlog of %s took 10,000 connections", name)
	return 0
}

// A full backlog (connect fails with EAGAIN on a unix socket) is retried
// until the dial's ctx ends: it does not mean that nobody serves the name,
// nor does it fail the dial at once.
func TestDialFullBacklog(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		name := "@zerodrop-test-backlog-" + strconv.Itoa(os.Getpid())
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		t.Logf("%d connections fill the backlog", flood(t, name))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		checkFull(t, ctx, "full backlog", name)
		// Room in the backlog: a retrying dial gets in.
		type dialed struct {
			c   *net.UnixConn
			ok  bool
			err error
		}
		res := make(chan dialed, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, ok, err := dial(ctx, name)
			res <- dialed{c, ok, err}
		}()
		ln.SetDeadline(time.Now().Add(30 * time.Second))
		for i := 0; ; i++ {
			select {
			case r := <-res:
				if r.err != nil || !r.ok {
					t.Fatalf("dial: ok=%v %v", r.ok, r.err)
				}
				r.c.Close()
				return
			default:
			}
			if i == 20_000 {
				t.Fatal("dial did not connect after 20,000 accepts")
			}
			c, err := ln.AcceptUnix()
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
		}
	})
}

// A dial that retries a full backlog and whose ctx ends as a retry begins
// still says EAGAIN, though that retry's connect fails with the deadline
// alone ("i/o timeout"), which TestDialFullBacklog got at load 10-19. On a
// loaded machine the backoff's timer and ctx are both ready by the time the
// dial runs, and select takes either ("after": a test hook runs the retry
// after the deadline); or ctx's deadline passes but its timer has not fired
// yet ("timer late": the connect's deadline is ctx's, its own timer fires
// first, and ctx.Err is still nil).
func TestDialFullBacklogLateRetry(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		name := "@zerodrop-test-backlog-late-" + strconv.Itoa(os.Getpid())
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		flood(t, name)
		defer func() { testHookRedial = nil }()

		const d = 50 * time.Millisecond
		start := time.Now()
		testHookRedial = func() { time.Sleep(max(d-time.Since(start), 0) + 10*time.Millisecond) }
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		checkFull(t, ctx, "after", name)

		late := &lateCtx{Context: context.Background(), deadline: time.Now().Add(time.Hour)}
		testHookRedial = func() { late.deadline = time.Now().Add(-time.Millisecond) }
		checkFull(t, late, "timer late", name)
	})
}

// lateCtx is a ctx whose deadline has passed (once set so) but whose timer
// has not fired: Err is nil, Done never closes.
type lateCtx struct {
	context.Context
	deadline time.Time
}

func (c *lateCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// checkFull dials name, whose backlog is full, with ctx: the dial fails with
// a *net.OpError naming name of EAGAIN retried until the deadline.
func checkFull(t *testing.T, ctx context.Context, what, name string) {
	t.Helper()
	c, ok, err := dial(ctx, name)
	if c != nil {
		c.Close()
	}
	var oe *net.OpError
	if ok || !errors.Is(err, syscall.EAGAIN) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) || oe.Addr.String() != name {
		t.Fatalf("%s: dial with a full backlog: ok=%v %v; want a *net.OpError naming %s of EAGAIN retried until the deadline", what, ok, err, name)
	}
	t.Logf("%s: %v", what, err)
}

// A connect flood on an abstract handoff name, by a process that never lets
// go of its connections, does not fail a legitimate successor: it takes the
// predecessor's sockets over within its Timeout.
func TestConnectFloodAbstract(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		name := "@zerodrop-test-flood-" + strconv.Itoa(os.Getpid())
		old := startApp(t, name)
		addr := old.expect(t, "ready")[3]
		// Stopped, the predecessor accepts nothing: the flood fills its
		// backlog, and so would a faster flood against a busy one.
		if err := old.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer old.Signal(syscall.SIGCONT)
		t.Logf("%d connections fill the backlog", flood(t, name))
		if fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0); err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: name})
			unix.Close(fd)
			if !errors.Is(err, unix.EAGAIN) {
				t.Fatalf("connect to the flooded name: %v, want EAGAIN", err)
			}
		}
		type made struct {
			u   *Upgrader
			err error
		}
		res := make(chan made, 1)
		go func() {
			u, err := New(context.Background(), Config{Path: name, Timeout: 30 * time.Second})
			res <- made{u, err}
		}()
		// While the predecessor is stopped New cannot succeed: give it a
		// second to fail (which it must not), then let the predecessor go on.
		var r made
		select {
		case r = <-res:
			t.Fatalf("New returned while its predecessor was stopped: %v", r.err)
		case <-time.After(time.Second):
		}
		if err := old.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		select {
		case r = <-res:
		case <-time.After(90 * time.Second):
			t.Fatal("New did not return in 90 s")
		}
		if r.err != nil {
			t.Fatalf("successor during the flood: %v", r.err)
		}
		defer r.u.Close()
		ln := takeHTTP(t, r.u, addr)
		old.expect(t, "exit")
		serveOnce(t, ln, 2)
	})
}
