package handoff

import (
	"context"
	"errors"
	"fmt"
)

// HandleConns registers h to receive the connections a predecessor passes
// for the listener name, in this process's successor role: once Ready has
// told the predecessor which listeners' connections it takes (every name
// registered), each connection passed arrives as one call of h, on one
// goroutine, in order. h owns the connection; it must not block for long
// (hand it to a server). Call it before Ready. A predecessor of protocol
// version 1 passes none.
func (u *Upgrader) HandleConns(name string, h func(PassedConn)) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case h == nil:
		return u.opError(errors.New("handle conns: nil handler"))
	case u.closed:
		return u.opError(fmt.Errorf("handle conns: %w", ErrClosed))
	case u.ready:
		return u.opError(errors.New("handle conns: called after Ready"))
	}
	u.pass.handle(name, h)
	return nil
}

// listenerAddrs is the bound address of each of our sockets, by name: a
// connection passed for a name must have been accepted on it.
func (u *Upgrader) listenerAddrs() map[string]string {
	addrs := map[string]string{}
	for _, s := range u.table.Offer() {
		addrs[s.Name()] = s.Address()
	}
	return addrs
}

// TakesConns reports whether a successor is ready and takes the connections
// of the listener name: PassConns can then pass them. It becomes true
// before Exit is closed, and false once the conversation with the successor
// has failed or the Upgrader is closed.
func (u *Upgrader) TakesConns(name string) bool {
	s := u.pass.successor()
	return s != nil && s.Takes(name)
}

// StopTakingConns ends the conversations on which a predecessor passes
// this process connections: a batch not acknowledged yet stays the
// predecessor's (its PassConns fails with ErrNotTaken), and so do later
// ones. It returns once every connection acknowledged has been given to its
// handler. Call it before the handlers stop taking connections (a
// drain.Server's ServeConn closes a connection late in its Shutdown): a
// connection acknowledged after that would be closed. Passing our own
// connections to a successor (PassConns) goes on. Safe to call more than
// once, and concurrently.
func (u *Upgrader) StopTakingConns() { u.pass.stopReceiving() }

// PassConns passes conns to the ready successor: see ConnSender.PassConns.
// Without a successor that takes connections, it fails with ErrNotTaken.
func (u *Upgrader) PassConns(ctx context.Context, conns []PassedConn) (passed int, err error) {
	s := u.pass.successor()
	if s == nil {
		return 0, u.opError(fmt.Errorf("pass conns: no successor takes connections: %w", ErrNotTaken))
	}
	return s.PassConns(ctx, conns)
}
