package sysdbox

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InNet runs f on an OS thread of its own that has joined the box's network
// namespace, and waits for it. Sockets f creates (net.Dial, sockdiag), and
// /proc/thread-self/net (linux.ReadSNMP), are the box's. The thread is
// never reused: it ends with f's goroutine (runtime.LockOSThread without
// Unlock). f must not start goroutines that create sockets: they run on other
// threads, in the test's namespace.
func (b *Box) InNet(f func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread leaves the namespace by exiting
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", b.PID), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("sysdbox: open the box's netns: %w", &os.PathError{Op: "open", Path: fmt.Sprintf("/proc/%d/ns/net", b.PID), Err: err})
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("sysdbox: join the box's netns: %w", os.NewSyscallError("setns", err))
			return
		}
		f()
		errc <- nil
	}()
	return <-errc
}
