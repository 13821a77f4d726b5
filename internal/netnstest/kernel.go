package netnstest

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// WaitQueue waits, up to 5 s, until the listening socket c holds n connections
// in its accept queue (TCP_INFO), and fails the test otherwise.
func WaitQueue(tb testing.TB, c syscall.Conn, n uint32) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var q uint32
		err := linux.Control(c, func(fd int) (err error) {
			q, _, err = linux.ListenQueue(fd)
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("accept queue %d, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// MountBPF mounts a bpf filesystem whose root has the given mode (e.g. "0755")
// on a new world-traversable directory, and unmounts it at cleanup, so pins
// vanish with the test. The test's mount namespace is the host's unless the
// test made its own; the mount is private to the directory either way.
func MountBPF(tb testing.TB, mode string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "zerodrop-bpffs-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode="+mode); err != nil {
		tb.Fatalf("mount bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
