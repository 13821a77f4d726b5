package neterr

import (
	"errors"
	"net"
)

// Op returns err in a *net.OpError{Op: op, Net: network, Addr: addr}. It
// wraps once: nil stays nil, and an err that already is a *net.OpError for
// op is returned as it is (not "listen tcp A: listen tcp A: ..."). addr may
// be nil.
func Op(op, network string, addr net.Addr, err error) error {
	return wrap(op, network, nil, addr, err)
}

// OpConn is Op for an operation on the connection c, shaped as the net
// package's own connection errors are: Source is c's local address, Addr
// its remote one. c must not be nil.
func OpConn(op, network string, c net.Conn, err error) error {
	return wrap(op, network, c.LocalAddr(), c.RemoteAddr(), err)
}

// OpText is Op for an address known only as text (one that may not parse):
// the error prints it as given.
func OpText(op, network, address string, err error) error {
	var addr net.Addr
	if address != "" {
		addr = textAddr{network, address}
	}
	return Op(op, network, addr, err)
}

// wrap is the one constructor: the wrap-once guard of Op, OpConn, OpText.
func wrap(op, network string, source, addr net.Addr, err error) error {
	if err == nil {
		return nil
	}
	var oe *net.OpError
	if errors.As(err, &oe) && error(oe) == err && oe.Op == op {
		return err
	}
	return &net.OpError{Op: op, Net: network, Source: source, Addr: addr, Err: err}
}

// textAddr is a net.Addr that is only its text.
type textAddr struct{ net, addr string }

func (a textAddr) Network() string { return a.net }
func (a textAddr) String() string  { return a.addr }
