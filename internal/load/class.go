package load

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Class is the outcome of one request.
type Class string

// The outcomes of a request. Every class but OK is a failure.
const (
	OK      Class = "ok"      // a full reply with a status below 400
	Reset   Class = "reset"   // ECONNRESET, ECONNABORTED or EPIPE
	Refused Class = "refused" // ECONNREFUSED
	EOF     Class = "eof"     // the connection ended before a full reply
	Timeout Class = "timeout" // Config.Timeout passed first
	Status  Class = "status"  // a full reply with a status of 400 or above
	Other   Class = "other"   // anything else
)

// failures lists the failure classes, in the order reports show them.
var failures = []Class{Reset, Refused, EOF, Timeout, Status, Other}

// Classify returns the class of a request's error; nil is OK. It looks through
// wrapped errors, so errors from net, net/http and net/url all classify.
func Classify(err error) Class {
	var se *statusError
	switch {
	case err == nil:
		return OK
	case errors.As(err, &se):
		return Status
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE):
		return Reset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		// net/http's Transport returns this unexported error, undecorated,
		// when the server closes a connection before it sent any reply.
		strings.HasSuffix(err.Error(), "server closed idle connection"):
		return EOF
	case isTimeout(err):
		return Timeout
	}
	return Other
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// statusError reports a full reply whose status is 400 or above.
type statusError struct{ code int }

func (e *statusError) Error() string { return "load: status " + strconv.Itoa(e.code) }
