package ticket

import "errors"

// FDName is the name of the memfd of Export (/proc/PID/fd shows
// "/memfd:zerodrop-tickets"), and the FDNAME= under which zerodrop.Serve
// keeps it in systemd's fd store, where handoff/systemd.Activation.Tickets
// finds it at the next start.
const FDName = "zerodrop-tickets"

var (
	// ErrClosed is returned by the methods of Keys after Close.
	ErrClosed = errors.New("ticket: keys closed")
	// ErrInvalid says a file given to Import is not keys that Export
	// wrote: not a sealed memfd, or not of its format.
	ErrInvalid = errors.New("ticket: not a sealed key memfd")
)

// ErrHooksSet is returned by Install for a tls.Config whose WrapSession or
// UnwrapSession is set already: its tickets are someone else's.
var ErrHooksSet = errors.New("ticket: tls.Config has WrapSession or UnwrapSession set")
