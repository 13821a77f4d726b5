package reuseport

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Typed errors below match them with errors.Is.
var (
	// ErrUIDMismatch: the group on this address belongs to another user; the
	// kernel would refuse the bind with a bare EADDRINUSE.
	ErrUIDMismatch = errors.New("reuseport group owned by another uid")
	// ErrNotReusable: a listener without SO_REUSEPORT holds the address.
	ErrNotReusable = errors.New("address held by a listener without SO_REUSEPORT")
	// ErrAddrOverlap: a reuseport listener on an overlapping address (wildcard
	// versus specific) holds the port and the kernel refused to share it.
	ErrAddrOverlap = errors.New("port held on an overlapping address")
	// ErrMigrationDisabled: net.ipv4.tcp_migrate_req is 0 (or missing) under
	// the Require policy.
	ErrMigrationDisabled = errors.New("net.ipv4.tcp_migrate_req is not enabled")
	// ErrOptionMismatch: two sockets of one group differ in an option that matters.
	ErrOptionMismatch = errors.New("socket options differ")
	// ErrNotSupported: the platform, kernel or socket lacks what was asked.
	// It is errors.ErrUnsupported (the one "not supported" sentinel of the
	// module; drain.ErrNotSupported is the same value), so errors.Is(err,
	// errors.ErrUnsupported) matches every such error from zerodrop.
	ErrNotSupported = errors.ErrUnsupported
)

// UIDMismatchError says who owns the group the caller tried to join. The kernel
// compares socket owners (the creator's fsuid at socket() time), so Ours is the
// UID of the socket we created, not necessarily the process's euid.
type UIDMismatchError struct {
	Addr   string   // the address we tried to bind
	Ours   uint32   // owner of our socket
	Theirs []uint32 // owners of the listeners already there
	PIDs   []int    // processes holding those listeners (best effort)
	Note   string   // why PIDs may be incomplete, if so
}

func (e *UIDMismatchError) Error() string {
	s := fmt.Sprintf("%v: uid %s (pids %v) listens on %s and our socket belongs to uid %d; the kernel lets only sockets of one uid share a port",
		ErrUIDMismatch, joinUint(e.Theirs), e.PIDs, e.Addr, e.Ours)
	if e.Note != "" {
		s += " (" + e.Note + ")"
	}
	return s
}

// Is reports whether target is ErrUIDMismatch.
func (e *UIDMismatchError) Is(target error) bool { return target == ErrUIDMismatch }

// OptionDiff is one option that differs between two sockets.
type OptionDiff struct {
	Option string // e.g. "TCP_DEFER_ACCEPT"
	Want   string // value on the reference socket
	Got    string // value on the other socket
}

// OptionMismatchError names every option that differs between two digests.
type OptionMismatchError struct {
	Diffs []OptionDiff
}

func (e *OptionMismatchError) Error() string {
	parts := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		parts[i] = fmt.Sprintf("%s want %s got %s", d.Option, d.Want, d.Got)
	}
	return "socket options differ: " + strings.Join(parts, ", ")
}

// Is reports whether target is ErrOptionMismatch.
func (e *OptionMismatchError) Is(target error) bool { return target == ErrOptionMismatch }

// Options returns the names of the options that differ.
func (e *OptionMismatchError) Options() []string {
	names := make([]string, len(e.Diffs))
	for i, d := range e.Diffs {
		names[i] = d.Option
	}
	return names
}

// AddrInUseError explains an EADDRINUSE from bind. It unwraps to the syscall
// error, so errors.Is(err, syscall.EADDRINUSE) holds, and matches ErrNotReusable
// or ErrAddrOverlap when the cause was found.
type AddrInUseError struct {
	Addr    string   // the address we tried to bind
	Cause   error    // ErrNotReusable, ErrAddrOverlap, or nil when unknown
	Holders []Member // the listeners found on the port
	Err     error    // the bind error
}

func (e *AddrInUseError) Error() string {
	var who []string
	for _, m := range e.Holders {
		who = append(who, m.String())
	}
	switch {
	case e.Cause == ErrNotReusable:
		return fmt.Sprintf("%v (%s); stop it or give it SO_REUSEPORT: %v", e.Cause, strings.Join(who, "; "), e.Err)
	case e.Cause != nil:
		return fmt.Sprintf("%v (%s): %v", e.Cause, strings.Join(who, "; "), e.Err)
	case len(who) > 0:
		return fmt.Sprintf("cause unknown; listeners on the port: %s: %v", strings.Join(who, "; "), e.Err)
	}
	return fmt.Sprintf("no listener holds the port (a bound, not listening socket, or a connection using it as its local port?): %v", e.Err)
}

// Unwrap returns the cause (if known) and the bind error.
func (e *AddrInUseError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Cause, e.Err}
}

func joinUint(v []uint32) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
