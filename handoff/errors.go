package handoff

import (
	"errors"
	"fmt"
	"os"

	"github.com/zerodrop/zerodrop/sockets"
)

// Sentinel errors; the typed errors below match them with errors.Is.
var (
	// ErrHandoffInProgress: the predecessor is already handing its sockets to
	// another successor; only one may take over at a time.
	ErrHandoffInProgress = errors.New("handoff in progress: the predecessor is already handing over to another process; retry after it finished or failed")
	// ErrBusy: the handoff server holds as many conversations, or buffers as
	// many bytes of frames being read, as it may; it refused this one.
	ErrBusy = errors.New("handoff socket busy: too many conversations or bytes in flight; retry")
	// ErrPeerRefused: the peer's credentials (SO_PEERCRED) are not allowed.
	ErrPeerRefused = errors.New("peer credentials refused")
	// ErrInsecurePath: the handoff socket's directory is writable by others,
	// or owned by another user.
	ErrInsecurePath = errors.New("insecure handoff socket path")
	// ErrVersion: the peer speaks another protocol version.
	ErrVersion = errors.New("protocol version mismatch")
	// ErrProtocol: a frame was malformed or unexpected.
	ErrProtocol = errors.New("protocol error")
	// ErrFrameTooLarge: a frame's header announces more than MaxFrame bytes.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrTruncated: the peer closed the connection inside a frame.
	ErrTruncated = errors.New("truncated frame")
	// ErrFDCount: the fds received do not match the offer.
	ErrFDCount = errors.New("fd count does not match the offer")
	// ErrValidation: a received fd is not what the offer declared.
	ErrValidation = errors.New("received socket failed validation")
	// ErrBadPath: the handoff socket path (or a unix listener's) cannot be
	// used: empty, too long for a unix socket address, or naming something
	// other than a socket. It is sockets.ErrBadPath.
	ErrBadPath = sockets.ErrBadPath
	// ErrNoAnswer: a predecessor holds the handoff socket (the connect
	// succeeded) but did not answer within Config.Timeout, e.g. its serve
	// loop is wedged. New does not start fresh beside it: that would be a
	// second lineage of listeners next to a live one.
	ErrNoAnswer = errors.New("predecessor does not answer")
	// ErrPathInUse: a live process answers on the socket path (ListenConns
	// does not take the path of a live ConnListener).
	ErrPathInUse = errors.New("socket path in use by a live listener")
	// ErrClosed: the Upgrader (and its socket table) was closed. It is
	// sockets.ErrClosed.
	ErrClosed = sockets.ErrClosed
	// ErrReadyIncomplete: Ready told the predecessor to stop, then a later
	// step failed (the predecessor's done, the handoff socket for a
	// successor, the PID file). The predecessor stops, or has stopped: this
	// process is the one that serves the sockets now, and must go on
	// serving them (draining them would leave nobody serving); the error
	// says what it lacks. Any other Ready error left the predecessor
	// serving.
	ErrReadyIncomplete = errors.New("ready incomplete: the predecessor was told to stop")
	// ErrNotTaken: the connections were not passed (no successor takes them, or
	// it refused or did not acknowledge them); they are still the caller's.
	ErrNotTaken = errors.New("connections not taken by a successor")
)

// Error codes carried by error frames (RemoteError.Code).
const (
	codeVersion    = "version"
	codeInProgress = "in_progress"
	codeBusy       = "busy"
	codePermission = "permission"
	codeProtocol   = "protocol"
	codeValidation = "validation"
	codeInternal   = "internal"
)

// code maps an error to the code of the error frame that reports it.
func code(err error) string {
	switch {
	case errors.Is(err, ErrVersion):
		return codeVersion
	case errors.Is(err, ErrPeerRefused):
		return codePermission
	case errors.Is(err, ErrValidation):
		return codeValidation
	case errors.Is(err, ErrBusy):
		return codeBusy
	case errors.Is(err, ErrProtocol), errors.Is(err, ErrFDCount), errors.Is(err, ErrFrameTooLarge), errors.Is(err, ErrTruncated):
		return codeProtocol
	}
	return codeInternal
}

// FrameError is a frame that could not be read, decoded or accepted.
type FrameError struct {
	Type   string // frame type, when known
	Err    error  // ErrProtocol, ErrVersion, ErrFrameTooLarge, ErrTruncated, ErrFDCount or ErrBusy
	Detail string
}

// Error describes the failure.
func (e *FrameError) Error() string {
	s := e.Err.Error()
	if e.Type != "" {
		s += " in " + e.Type + " frame"
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the sentinel.
func (e *FrameError) Unwrap() error { return e.Err }

// RemoteError is an error frame sent by the peer.
type RemoteError struct {
	Code    string // "version", "in_progress", "busy", "permission", "protocol", "validation", "internal"
	Message string
}

// Error describes the failure.
func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer refused (%s): %s", e.Code, e.Message)
}

// Is matches the sentinel of the code: in_progress is ErrHandoffInProgress,
// busy is ErrBusy, permission is ErrPeerRefused, version is ErrVersion, validation is
// ErrValidation, protocol is ErrProtocol.
func (e *RemoteError) Is(target error) bool {
	return map[string]error{
		codeInProgress: ErrHandoffInProgress, codeBusy: ErrBusy, codePermission: ErrPeerRefused, codeVersion: ErrVersion,
		codeValidation: ErrValidation, codeProtocol: ErrProtocol,
	}[e.Code] == target
}

// PeerError says who was refused: the process at the other end of the handoff
// socket, by the kernel's credentials of it (SO_PEERCRED of a successor,
// SCM_CREDENTIALS of what a predecessor wrote).
type PeerError struct {
	PID      int32
	UID, GID uint32
	Allowed  []uint32 // the UIDs accepted
}

// Error describes the failure.
func (e *PeerError) Error() string {
	return fmt.Sprintf("%v: pid %d uid %d is not among the allowed uids %v (same euid by default; see Config.AllowUIDs)", ErrPeerRefused, e.PID, e.UID, e.Allowed)
}

// Is reports whether target is ErrPeerRefused.
func (e *PeerError) Is(target error) bool { return target == ErrPeerRefused }

// InsecurePathError explains why a handoff socket path was refused.
type InsecurePathError struct {
	Path string
	Dir  string
	Mode os.FileMode
	UID  uint32
	Why  string
}

// Error describes the failure.
func (e *InsecurePathError) Error() string {
	return fmt.Sprintf("%v %s: directory %s (mode %v, owner uid %d) %s", ErrInsecurePath, e.Path, e.Dir, e.Mode, e.UID, e.Why)
}

// Is reports whether target is ErrInsecurePath.
func (e *InsecurePathError) Is(target error) bool { return target == ErrInsecurePath }

// PathError explains why a handoff socket path (or PID file path, or a unix
// listener's path) cannot be used. It matches ErrBadPath.
type PathError = sockets.PathError

// ValidationError is a received fd that is not what the offer declared.
type ValidationError struct {
	Name  string // the socket's name in the offer
	Check string // e.g. "S_IFSOCK", "SO_TYPE", "getsockname", "digest"
	Want  string
	Got   string
	Err   error // underlying syscall error, if any
}

// Error describes the failure.
func (e *ValidationError) Error() string {
	s := fmt.Sprintf("%v: socket %q: %s want %s got %s", ErrValidation, e.Name, e.Check, e.Want, e.Got)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrValidation and the underlying error.
func (e *ValidationError) Unwrap() []error { return []error{ErrValidation, e.Err} }
