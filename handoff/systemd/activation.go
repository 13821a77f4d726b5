package systemd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/zerodrop/zerodrop/reuseport"
)

// The variables of the socket activation protocol (sd_listen_fds(3)).
const (
	EnvListenPID     = "LISTEN_PID"
	EnvListenFDs     = "LISTEN_FDS"
	EnvListenFDNames = "LISTEN_FDNAMES"
)

// firstFD is SD_LISTEN_FDS_START: systemd passes fds 3, 4, ...
const firstFD = 3

// maxFDs bounds LISTEN_FDS; systemd's own FileDescriptorStoreMax= limit is 4096.
const maxFDs = 1 << 16

// Activation holds the fds systemd passed to this process. Take hands them out
// one by one; the caller owns each file it takes. Safe for concurrent use.
type Activation struct {
	mu  sync.Mutex
	fds []passed // not yet taken, in LISTEN_FDS order
}

// passed is one checked fd and what the kernel says it is.
type passed struct {
	f       *os.File // from activation.Files; owned by the Activation until taken
	fd      int
	name    string
	sock    reuseport.Socket // the zero Socket when tickets
	tickets bool             // a memfd of ticket.Keys.Export named ticket.FDName, not a socket
}

var (
	once      sync.Once
	activated *Activation
	actErr    error
	// unheld keeps the files of a failed activation referenced for the
	// life of the process: dropped, their finalizers would close fds 3..
	// (which stay open, as documented) or, for an fd that was missing, a
	// number something else opened since.
	unheld []*os.File
)

// Activated reads LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES once (checks LISTEN_PID
// == os.Getpid(), takes fds 3.. from go-systemd's activation.Files and checks
// that every one exists, is a socket, and has FD_CLOEXEC), unsets
// LISTEN_* so children don't inherit them, and returns nil, nil when the process
// was not socket-activated. Each bad variable or fd gives its own typed error.
//
// The first call does the work; later calls return the same *Activation and
// error. Unlike sd_listen_fds(3), which treats a LISTEN_PID of another process
// as "not activated", Activated reports it (ErrListenPID): the variables leaked
// from a parent, and the fds numbered in them are not ours. On error no fd is
// handed out; the fds that were checked stay open, close-on-exec.
//
// One fd may be no socket: the one named ticket.FDName (zerodrop-tickets),
// the session-ticket keys zerodrop.Serve keeps in the fd store, which must be
// a memfd of ticket.Keys.Export (ticket.Check: its name, seals and size) and
// is handed out by Tickets only.
//
// Errors are *EnvError (ErrListenPID, ErrListenFDs, ErrListenFDNames) or, joined
// with errors.Join, one *FDError per bad fd (ErrFDMissing, ErrNotSocket,
// ErrTickets).
func Activated() (*Activation, error) {
	once.Do(func() {
		activated, actErr = activate(os.Getenv, os.Getpid(), activation.Files)
		for _, v := range []string{EnvListenPID, EnvListenFDs, EnvListenFDNames} {
			if err := os.Unsetenv(v); err != nil && actErr == nil {
				actErr = fmt.Errorf("systemd activation: unset %s: %w", v, err)
			}
		}
	})
	return activated, actErr
}

// activate reads the environment with getenv, then takes the fds from files
// (go-systemd's activation.Files, which follows the protocol: fds 3.. as
// *os.File, close-on-exec, named by LISTEN_FDNAMES) and checks each.
//
// Two things go-systemd cannot do, so they are ours. activation.Files
// returns nil, with no error, for every fault of the variables (a LISTEN_PID
// of another process, a malformed LISTEN_FDS) and names fds by position
// whatever LISTEN_FDNAMES holds, so parseEnv reads them first and reports
// each fault (*EnvError). And it wraps each fd without looking at it (its
// CloseOnExec drops the error of a missing fd), so each *os.File is checked
// here (open, a socket, the fd number expected) before any is handed out:
// go-systemd's own Listeners drops such errors.
func activate(getenv func(string) string, pid int, files func(unsetEnv bool) []*os.File) (*Activation, error) {
	n, names, err := parseEnv(getenv, pid)
	if n == 0 {
		return nil, err
	}
	var errs []error
	if err != nil { // bad LISTEN_FDNAMES: the fds are still ours, check them
		errs = append(errs, err)
	}
	fs := files(false) // Activated unsets LISTEN_* itself, and reports it
	if len(fs) != n {
		errs = append(errs, &FDError{Op: "activate", FD: firstFD + len(fs), Kind: ErrFDMissing,
			Err: fmt.Errorf("activation.Files returned %d files for %s=%d", len(fs), EnvListenFDs, n)})
	}
	a := &Activation{fds: make([]passed, 0, len(fs))}
	for i, f := range fs {
		p := passed{f: f}
		if names != nil && i < len(names) {
			p.name = names[i]
		}
		if err := p.check(firstFD + i); err != nil {
			errs = append(errs, err)
			continue
		}
		a.fds = append(a.fds, p)
	}
	if len(errs) > 0 {
		unheld = append(unheld, fs...)
		return nil, errors.Join(errs...)
	}
	return a, nil
}

// parseEnv returns the fd count and names (nil when LISTEN_FDNAMES is unset).
// With a bad LISTEN_FDNAMES it returns the count too: the fds are ours.
// activation.Files reads the same variables but reports none of their
// faults (see activate).
func parseEnv(getenv func(string) string, pid int) (int, []string, error) {
	pidStr, fdsStr, namesStr := getenv(EnvListenPID), getenv(EnvListenFDs), getenv(EnvListenFDNames)
	if pidStr == "" && fdsStr == "" {
		return 0, nil, nil
	}
	if fdsStr == "" {
		return 0, nil, &EnvError{Var: EnvListenFDs, Err: fmt.Errorf("%w: unset while %s=%s", ErrListenFDs, EnvListenPID, pidStr)}
	}
	if pidStr == "" {
		return 0, nil, &EnvError{Var: EnvListenPID, Err: fmt.Errorf("%w: unset while %s=%s", ErrListenPID, EnvListenFDs, fdsStr)}
	}
	got, err := strconv.Atoi(pidStr)
	if err != nil {
		return 0, nil, &EnvError{Var: EnvListenPID, Value: pidStr, Err: fmt.Errorf("%w: %w", ErrListenPID, err)}
	}
	if got != pid {
		return 0, nil, &EnvError{Var: EnvListenPID, Value: pidStr, Err: fmt.Errorf("%w: names pid %d, this is pid %d", ErrListenPID, got, pid)}
	}
	n, err := strconv.Atoi(fdsStr)
	if err != nil {
		return 0, nil, &EnvError{Var: EnvListenFDs, Value: fdsStr, Err: fmt.Errorf("%w: %w", ErrListenFDs, err)}
	}
	if n < 0 || n > maxFDs {
		return 0, nil, &EnvError{Var: EnvListenFDs, Value: fdsStr, Err: fmt.Errorf("%w: want 0..%d", ErrListenFDs, maxFDs)}
	}
	if namesStr == "" {
		return n, nil, nil
	}
	names := strings.Split(namesStr, ":")
	if len(names) != n {
		return n, nil, &EnvError{Var: EnvListenFDNames, Value: namesStr, Err: fmt.Errorf("%w: %d names for %d fds", ErrListenFDNames, len(names), n)}
	}
	return n, names, nil
}

// Take returns, and removes from a, the fd named name (FileDescriptorName=), or
// when name is "" or not found by name the first whose local address matches
// network/address; ok is false when none matches. The caller owns f, whose
// Name is its LISTEN_FDNAMES entry, or LISTEN_FD_<fd> without one (as
// go-systemd's activation.Files names it).
//
// An empty address matches no fd: Take("metrics", "tcp", "") never returns
// the fd named "http".
// A fd found by name must still be of the kind network asks for ("tcp", "tcp4",
// "tcp6" and "unix", "unixpacket" want a listening socket; "udp*", "unixgram" a
// datagram socket) and, when address is not "", bound to address; otherwise
// Take returns an *FDError matching ErrKind and keeps the fd. network "" accepts
// any kind. Addresses are compared as literals: "host:port" with an IP or an
// empty host (the wildcard address of either family), or a unix path ("@name"
// for the abstract namespace). A nil a has nothing to take.
func (a *Activation) Take(name, network, address string) (f *os.File, ok bool, err error) {
	p, ok, err := a.take(name, network, address)
	if !ok {
		return nil, false, err
	}
	return p.f, true, nil
}

func (a *Activation) take(name, network, address string) (passed, bool, error) {
	if a == nil {
		return passed{}, false, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i := -1
	if name != "" {
		i = a.byName(name)
	}
	if i >= 0 {
		if err := a.fds[i].matches(network, address); err != nil {
			return passed{}, false, &FDError{Op: "take", FD: a.fds[i].fd, Name: name, Kind: ErrKind, Err: err}
		}
	} else {
		i = a.byAddr(network, address)
	}
	if i < 0 {
		return passed{}, false, nil
	}
	p := a.fds[i]
	a.fds = append(a.fds[:i], a.fds[i+1:]...)
	return p, true, nil
}

func (a *Activation) byName(name string) int {
	for i, p := range a.fds {
		if p.name == name {
			return i
		}
	}
	return -1
}

func (a *Activation) byAddr(network, address string) int {
	if address == "" {
		return -1
	}
	for i, p := range a.fds {
		if p.matches(network, address) == nil {
			return i
		}
	}
	return -1
}

// Available lists the fds not taken yet, as "name=network:address" (name is
// empty when LISTEN_FDNAMES was unset).
func (a *Activation) Available() []string {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, len(a.fds))
	for i, p := range a.fds {
		if p.tickets {
			out[i] = p.name + "=memfd"
			continue
		}
		out[i] = p.name + "=" + p.sock.String()
	}
	return out
}

// Tickets returns, and removes from a, the memfd of session-ticket keys
// named ticket.FDName (ticket.Keys.Export's, which zerodrop.Serve keeps in
// the fd store), checked by Activated; ok is false when systemd passed none.
// When systemd passed several (stores that were not replaced), the last,
// the newest, is returned and the others are closed. The caller owns f: it
// reads the keys with ticket.Keys.Import and closes it. A nil a has none.
func (a *Activation) Tickets() (f *os.File, ok bool) {
	if a == nil {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	kept := a.fds[:0]
	for _, p := range a.fds {
		switch {
		case !p.tickets:
			kept = append(kept, p)
			continue
		case f != nil:
			f.Close()
		}
		f = p.f
	}
	clear(a.fds[len(kept):])
	a.fds = kept
	return f, f != nil
}

// Close closes the fds not taken yet (systemd keeps its own copies of activated
// sockets and stored fds). It is safe to call more than once.
func (a *Activation) Close() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	for _, p := range a.fds {
		if err := p.f.Close(); err != nil {
			errs = append(errs, &FDError{Op: "close", FD: p.fd, Name: p.name, Kind: ErrFDMissing, Err: err})
		}
	}
	a.fds = nil
	return errors.Join(errs...)
}
