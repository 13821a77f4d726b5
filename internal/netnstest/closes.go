package netnstest

import (
	"context"
	"net"
	"sync/atomic"
)

// Closes counts, of the connections a client dialled through Dial, which
// side ended each first: Server, a read failed (EOF, a reset) before the
// client closed it; Client, the client closed it first. A client that
// leaves a connection without a failed read, and without a response that
// said Connection: close, did so on its own: net/http's Transport does
// when its write goroutine, starved of CPU, has not reported within 50 ms
// of the response, and it then dials again. Tests that assert where a
// client's next connection lands tell those apart from the server's.
type Closes struct {
	Server, Client atomic.Int64
}

// Dial wraps dial (nil: a net.Dialer's) so that every connection it returns
// counts in c.
func (c *Closes) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &watchedConn{Conn: conn, c: c}, nil
	}
}

// watchedConn is a connection whose first end counts in c.
type watchedConn struct {
	net.Conn
	c     *Closes
	ended atomic.Bool
}

func (w *watchedConn) Read(p []byte) (int, error) {
	n, err := w.Conn.Read(p)
	if err != nil && w.ended.CompareAndSwap(false, true) {
		w.c.Server.Add(1)
	}
	return n, err
}

func (w *watchedConn) Close() error {
	if w.ended.CompareAndSwap(false, true) {
		w.c.Client.Add(1)
	}
	return w.Conn.Close()
}
