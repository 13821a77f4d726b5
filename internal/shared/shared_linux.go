package shared

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Why a socket is shared.
const (
	Successor   = "handed to a successor"
	Predecessor = "received from a predecessor that still serves it"
	Systemd     = "held by systemd (socket activation or its fd store)"
)

type key struct{ dev, ino uint64 }

var (
	mu    sync.Mutex
	marks = map[key]string{}
	since = map[key]uint64{} // for Predecessor marks: when the sender started
)

func identity(fd int) (key, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return key{}, os.NewSyscallError("fstat", err)
	}
	return key{uint64(st.Dev), st.Ino}, nil
}

// Mark records that another process holds the socket fd refers to, and why.
// A later Mark replaces the reason.
func Mark(fd int, why string) error {
	k, err := identity(fd)
	if err != nil {
		return err
	}
	mu.Lock()
	marks[k] = why
	delete(since, k)
	mu.Unlock()
	return nil
}

// MarkReceived marks fd's socket Predecessor: received from a process that
// started at start (clock ticks after boot, as /proc/PID/stat says; 0 when
// unknown) and still serves it. Only a process that started no earlier than
// the sender (the sender, its successors, their children) can hold it
// unseen: Since says from when.
func MarkReceived(fd int, start uint64) error {
	k, err := identity(fd)
	if err != nil {
		return err
	}
	mu.Lock()
	marks[k], since[k] = Predecessor, start
	mu.Unlock()
	return nil
}

// Since returns what MarkReceived recorded of fd's sender's start, or 0.
func Since(fd int) (uint64, error) {
	k, err := identity(fd)
	if err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if marks[k] != Predecessor {
		return 0, nil
	}
	return since[k], nil
}

// Unmark forgets the mark of fd's socket if its reason is why (a handoff that
// failed takes back only its own mark).
func Unmark(fd int, why string) error {
	k, err := identity(fd)
	if err != nil {
		return err
	}
	mu.Lock()
	if marks[k] == why {
		delete(marks, k)
		delete(since, k)
	}
	mu.Unlock()
	return nil
}

// Lookup says why fd's socket is shared, or "" when no mark says it is.
func Lookup(fd int) (string, error) {
	k, err := identity(fd)
	if err != nil {
		return "", err
	}
	mu.Lock()
	defer mu.Unlock()
	return marks[k], nil
}
