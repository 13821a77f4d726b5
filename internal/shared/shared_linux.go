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
	mu.Unlock()
	return nil
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
