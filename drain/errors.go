package drain

import (
	"errors"

	"github.com/zerodrop/zerodrop/reuseport"
)

// ErrNotSupported is wrapped by Wrap's error for a listener it cannot drain:
// not a *net.TCPListener or *reuseport.Listener, or not an IPPROTO_TCP socket.
// It is reuseport.ErrNotSupported, which is errors.ErrUnsupported: the module
// has one "not supported" sentinel, kept under this name for drain's callers.
var ErrNotSupported = reuseport.ErrNotSupported

// ErrNilListener is returned by Wrap and Server.Serve, wrapped in a
// *net.OpError, for a nil listener (untyped, or a typed nil *net.TCPListener,
// *reuseport.Listener or *Listener).
var ErrNilListener = errors.New("nil listener")

// ErrNoHTTPServer is returned by Server.Serve and Server.Shutdown when
// Server.HTTP is nil.
var ErrNoHTTPServer = errors.New("drain.Server has no HTTP server")
