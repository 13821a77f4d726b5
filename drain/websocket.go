package drain

import (
	"net"
	"time"
)

// goingAway is a server's WebSocket close frame (RFC 6455 section 5.5.1,
// unmasked): FIN and opcode 8, then status 1001 "going away".
var goingAway = append([]byte{0x88, 2 + 10, 0x03, 0xe9}, "going away"...)

// GoingAway returns a Hijacked callback for WebSocket connections: it sends
// the close frame with status 1001 "going away" and gives the connection
// until timeout (default 1 s) to end: reads and writes on it fail after
// that, and it is closed then if its owner has not closed it. The owner's
// read loop sees the client's answering close frame and ends as usual.
//
// The frame is written with one Write on the connection while its owner may
// be writing too: that is safe when the owner's WebSocket library writes
// each frame with one Write (gorilla/websocket does; control frames may come
// between the fragments of a message); otherwise send the close frame from
// the owner instead. It does not block.
func GoingAway(timeout time.Duration) func(net.Conn) {
	timeout = orDefault(timeout, time.Second)
	return func(c net.Conn) {
		deadline := time.Now().Add(timeout)
		c.SetDeadline(deadline)
		time.AfterFunc(timeout, func() { c.Close() })
		go c.Write(goingAway) // bounded by the write deadline
	}
}
