package sysdbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNet runs f on an OS thread that has joined the box's network namespace,
// and waits for it. Sockets f creates (net.Dial, sockdiag), and
// /proc/thread-self/net (linux.ReadSNMP), are the box's. f must not start
// goroutines that create sockets: they run on other threads, in the test's
// namespace.
//
// The thread goes back to its own namespace afterwards and is reused; only if
// that fails does it end with the goroutine. Ending threads is what InNet
// must avoid: a child started with Pdeathsig (the box's unshare, nsenter) is
// killed when the thread that started it exits.
func (b *Box) InNet(f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := b.inNet(f)
		if err == nil || !errors.Is(err, errRestore) {
			runtime.UnlockOSThread()
		} // else the thread, stuck in the box's namespace, ends with us
		errc <- err
	}()
	return <-errc
}

var errRestore = errors.New("sysdbox: cannot return to the thread's network namespace")

func (b *Box) inNet(f func()) error {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sysdbox: %w", &os.PathError{Op: "open", Path: "/proc/thread-self/ns/net", Err: err})
	}
	defer unix.Close(self)
	path := fmt.Sprintf("/proc/%d/ns/net", b.PID)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sysdbox: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	err = unix.Setns(fd, unix.CLONE_NEWNET)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("sysdbox: join the box's netns: %w", os.NewSyscallError("setns", err))
	}
	f()
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("%w: %w", errRestore, os.NewSyscallError("setns", err))
	}
	return nil
}

// DialContext dials address from the box's network namespace (on a thread of
// its own, see InNet), for http.Transport.DialContext: the connection is the
// box's for its whole life, whichever thread reads it later.
func (b *Box) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	var err error
	if nerr := b.InNet(func() {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
	}); nerr != nil {
		return nil, nerr
	}
	return c, err
}
