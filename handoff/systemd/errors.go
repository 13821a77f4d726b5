package systemd

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error of this package matches one of them with
// errors.Is, and carries the details in an *EnvError, *FDError or
// *NotifyError.
var (
	// ErrListenPID: LISTEN_PID is missing while LISTEN_FDS is set, is not a
	// number, or names another process (the variables leaked from a parent).
	ErrListenPID = errors.New("LISTEN_PID does not name this process")
	// ErrListenFDs: LISTEN_FDS is not a non-negative number.
	ErrListenFDs = errors.New("LISTEN_FDS is malformed")
	// ErrListenFDNames: LISTEN_FDNAMES does not have one name per fd.
	ErrListenFDNames = errors.New("LISTEN_FDNAMES does not match LISTEN_FDS")
	// ErrFDMissing: LISTEN_FDS counts an fd that is not open in this process.
	ErrFDMissing = errors.New("passed fd is not open")
	// ErrNotSocket: a passed fd is open but is not a socket (a regular file,
	// a pipe, ...).
	ErrNotSocket = errors.New("passed fd is not a socket")
	// ErrTickets: the fd named ticket.FDName (zerodrop-tickets) is not a
	// memfd of session-ticket keys (ticket.Check: name, seals, size).
	ErrTickets = errors.New("passed fd is not a sealed session-ticket memfd")
	// ErrKind: a passed socket is not what the caller asked for (network,
	// listening state) or its local address differs from the one asked.
	ErrKind = errors.New("passed socket does not match")
	// ErrNotFound: no passed fd has the name (or address) asked for.
	ErrNotFound = errors.New("no passed fd with that name or address")
	// ErrNoNotifySocket: NOTIFY_SOCKET is not set, so systemd does not listen
	// for notifications (the service is not Type=notify, or not run by systemd).
	ErrNoNotifySocket = errors.New("NOTIFY_SOCKET is not set")
	// ErrNotify: a notification could not be sent.
	ErrNotify = errors.New("sd_notify failed")
)

// EnvError is a bad LISTEN_* variable.
type EnvError struct {
	Var   string // "LISTEN_PID", "LISTEN_FDS" or "LISTEN_FDNAMES"
	Value string // its value ("" when unset)
	Err   error  // one of the sentinels, possibly wrapping a parse error
}

func (e *EnvError) Error() string {
	return fmt.Sprintf("systemd activation: %s=%q: %v", e.Var, e.Value, e.Err)
}

// Unwrap returns the cause.
func (e *EnvError) Unwrap() error { return e.Err }

// FDError is a bad fd passed by systemd.
type FDError struct {
	Op   string // "activate" or "take"
	FD   int    // the fd number
	Name string // its LISTEN_FDNAMES entry ("" when none)
	Kind error  // the sentinel: ErrFDMissing, ErrNotSocket, ErrTickets, ErrKind or ErrNotFound
	Err  error  // the underlying cause (an *os.SyscallError, a description), or nil
}

func (e *FDError) Error() string {
	s := fmt.Sprintf("systemd %s: fd %d", e.Op, e.FD)
	if e.Name != "" {
		s += fmt.Sprintf(" (%q)", e.Name)
	}
	s += ": " + e.Kind.Error()
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the sentinel and the cause.
func (e *FDError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// NotFoundError says which name or address was asked for and what was passed.
type NotFoundError struct {
	Name    string   // the name asked for ("" for any)
	Network string   // the network asked for
	Address string   // the address asked for ("" for any)
	Have    []string // the passed fds still available, as "name=addr"
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("systemd: %v: name %q, %s %q; available: %v", ErrNotFound, e.Name, e.Network, e.Address, e.Have)
}

// Is reports whether target is ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }
