package systemd

import (
	"context"
	"net"

	"github.com/zerodrop/zerodrop/reuseport"
)

// Listener takes a listening socket like Take and turns it into a
// net.Listener (a *net.TCPListener or *net.UnixListener) that the caller owns.
// It is the primitive beneath package sockets, whose Table takes a
// generation's listeners from every origin the same way: it checks the
// options, returns a *reuseport.Listener, and marks the socket as systemd's,
// which makes package drain release it unless its holder scan reads every
// process and finds no other holder.
// When cfg is not nil the socket's options must agree with cfg (CheckOptions,
// TCP only; ignore lists options to leave out).
//
// Errors: ErrNotFound (*NotFoundError) when no fd matches, ErrKind (*FDError)
// when the named fd is of another kind, reuseport.ErrOptionMismatch. The fd is
// closed on every error after it was taken. A nil a has nothing to take.
func (a *Activation) Listener(ctx context.Context, name, network, address string, cfg *reuseport.Config, ignore ...string) (net.Listener, error) {
	p, ok, err := a.take(name, network, address)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &NotFoundError{Name: name, Network: network, Address: address, Have: a.Available()}
	}
	f := p.f
	defer f.Close()
	if cfg != nil {
		if err := CheckOptions(ctx, f, cfg, ignore...); err != nil {
			return nil, &FDError{Op: "take", FD: p.fd, Name: p.name, Kind: ErrKind, Err: err}
		}
	}
	l, err := net.FileListener(f)
	if err != nil {
		return nil, &FDError{Op: "take", FD: p.fd, Name: p.name, Kind: ErrKind, Err: err}
	}
	return l, nil
}
