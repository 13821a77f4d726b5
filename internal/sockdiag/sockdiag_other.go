//go:build !linux

package sockdiag

import (
	"errors"
	"fmt"
)

// Listeners needs NETLINK_SOCK_DIAG; on this system it returns an error
// wrapping errors.ErrUnsupported.
func Listeners(port uint16) ([]Listener, error) {
	return nil, fmt.Errorf("sockdiag: dump: %w", errors.ErrUnsupported)
}

// Owners needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func Owners(inodes []uint64) (owners map[uint64][]Process, unreadable []int, err error) {
	return nil, nil, fmt.Errorf("sockdiag: owners: %w", errors.ErrUnsupported)
}

// NetNS needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func NetNS() (uint64, error) {
	return 0, fmt.Errorf("sockdiag: netns: %w", errors.ErrUnsupported)
}

// SelfPID needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func SelfPID() (int, error) {
	return 0, fmt.Errorf("sockdiag: self pid: %w", errors.ErrUnsupported)
}

// Hidden needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func Hidden() (string, error) {
	return "", fmt.Errorf("sockdiag: hidden: %w", errors.ErrUnsupported)
}

// Suspects needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func Suspects(pids []int, self int) ([]int, error) {
	return nil, fmt.Errorf("sockdiag: suspects: %w", errors.ErrUnsupported)
}

// Handshakes needs NETLINK_SOCK_DIAG; on this system it returns an error
// wrapping errors.ErrUnsupported.
func Handshakes(port uint16) ([]Handshake, error) {
	return nil, fmt.Errorf("sockdiag: handshakes: %w", errors.ErrUnsupported)
}

// FDs needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func FDs(pid int, inode uint64) ([]int, error) {
	return nil, fmt.Errorf("sockdiag: fds: %w", errors.ErrUnsupported)
}

// LocalPID needs Linux's /proc; on this system it returns an error wrapping
// errors.ErrUnsupported.
func LocalPID(procPID int) (int, error) {
	return 0, fmt.Errorf("sockdiag: local pid: %w", errors.ErrUnsupported)
}

// IncomingCPU needs Linux; on this system it returns an error wrapping
// errors.ErrUnsupported.
func IncomingCPU(pid int, inode uint64) (int, error) {
	return -2, fmt.Errorf("sockdiag: incoming cpu: %w", errors.ErrUnsupported)
}
