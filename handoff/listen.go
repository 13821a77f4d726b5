package handoff

import (
	"context"
	"net"
)

// Listen returns the listener called name from the Upgrader's socket table
// (sockets.Table.Listen): the predecessor's, if it offered one of that name
// and kind on that address (checked against Config.Listen: options that
// differ fail with *reuseport.OptionMismatchError unless WarnOnMismatch);
// else systemd's, if activated and no predecessor answered; else a fresh
// one, through reuseport for "tcp", "tcp4", "tcp6", or a "unix" listener. A
// port 0 matches the inherited port. Unix listeners never unlink their path
// on Close, so neither the predecessor's nor ours removes the file the other
// uses. The listener is a *reuseport.Listener for "tcp", "tcp4" and "tcp6"
// whatever its origin (so Digest and Effective are always there), a
// *net.UnixListener for "unix". The caller owns the listener; the table
// keeps its own reference to offer the socket to a successor.
func (u *Upgrader) Listen(ctx context.Context, name, network, address string) (net.Listener, error) {
	return u.table.Listen(ctx, name, network, address)
}

// ListenPacket is Listen for UDP sockets ("udp", "udp4", "udp6"); the conn is
// a *reuseport.PacketConn whatever its origin.
func (u *Upgrader) ListenPacket(ctx context.Context, name, network, address string) (net.PacketConn, error) {
	return u.table.ListenPacket(ctx, name, network, address)
}
