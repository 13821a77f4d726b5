package shared

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestMarkFollowsTheSocket: a mark is found through any fd of the socket, and
// only the reason that made it takes it back.
func TestMarkFollowsTheSocket(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	dup, err := unix.Dup(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	if err := Mark(fds[0], Successor); err != nil {
		t.Fatal(err)
	}
	check := func(fd int, want string) {
		t.Helper()
		if got, err := Lookup(fd); got != want || err != nil {
			t.Errorf("Lookup(%d) = %q, %v; want %q", fd, got, err, want)
		}
	}
	check(dup, Successor)
	check(fds[1], "") // the other end is another socket
	Unmark(dup, Predecessor)
	check(fds[0], Successor)
	Unmark(dup, Successor)
	check(fds[0], "")
	if _, err := Lookup(-1); err == nil {
		t.Error("Lookup(-1): no error")
	}
}
