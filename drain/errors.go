package drain

import "errors"

// ErrNotSupported is wrapped by Wrap's error for a listener it cannot drain:
// not a *net.TCPListener or *reuseport.Listener, or not an IPPROTO_TCP socket.
var ErrNotSupported = errors.New("listener cannot be drained")

// ErrNilListener is returned by Wrap and Server.Serve, wrapped in a
// *net.OpError, for a nil listener (untyped, or a typed nil *net.TCPListener,
// *reuseport.Listener or *Listener).
var ErrNilListener = errors.New("nil listener")

// ErrNoHTTPServer is returned by Server.Serve and Server.Shutdown when
// Server.HTTP is nil.
var ErrNoHTTPServer = errors.New("drain.Server has no HTTP server")
