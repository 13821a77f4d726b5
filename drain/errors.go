package drain

import "errors"

// ErrNotSupported is wrapped by Wrap's error for a listener it cannot drain:
// not a *net.TCPListener or *reuseport.Listener, or not an IPPROTO_TCP socket.
var ErrNotSupported = errors.New("listener cannot be drained")
