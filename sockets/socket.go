package sockets

import (
	"fmt"
	"net"
	"os"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// Kind is what a socket of the table is; its values are the names the
// handoff protocol declares them by.
type Kind string

// The kinds of socket a table holds.
const (
	TCP  Kind = "tcp-listener"  // a listening TCP socket
	UDP  Kind = "udp"           // a UDP socket
	Unix Kind = "unix-listener" // a listening unix stream socket
)

// KindOf returns the kind of socket Listen ("tcp", "tcp4", "tcp6", "unix")
// or ListenPacket ("udp", "udp4", "udp6") makes for network, or "".
func KindOf(network string) Kind {
	switch network {
	case "tcp", "tcp4", "tcp6":
		return TCP
	case "udp", "udp4", "udp6":
		return UDP
	case "unix":
		return Unix
	}
	return ""
}

// Origin is where a socket of the table came from.
type Origin string

// The origins of a socket.
const (
	Inherited Origin = "inherited" // received from the predecessor
	Systemd   Origin = "systemd"   // systemd's socket activation
	Fresh     Origin = "fresh"     // created by this generation
)

// Socket is one socket of the table: its declaration, its origin, and the
// table's own reference to it (a close-on-exec fd), which is what a
// successor is offered. The caller's listener or packet conn is another fd
// of the same socket.
type Socket struct {
	name, network, address string
	kind                   Kind
	origin                 Origin
	fd                     int
	sock                   *reuseport.Socket // what the kernel says of it, read once

	// checked is the network the option check ran for, and checkErr its
	// result, so that Listen need not run it again.
	checked  string
	checkErr error
	// pre is the caller's listener or packet conn of an inherited socket,
	// built on its own dup by Prepare, so that Listen costs no syscall.
	pre *obtained
}

// NewInherited makes the Socket of an fd received from a predecessor, which
// still serves it, declared as name, kind, network and address; sock is
// what reuseport read of it (nil for a unix socket). The Socket owns fd from
// here: Close closes it. start is when the predecessor started (clock ticks
// after boot, 0 when unknown), recorded with the mark for drain's holder
// scan.
func NewInherited(name string, kind Kind, network, address string, fd int, sock *reuseport.Socket, start uint64) *Socket {
	shared.MarkReceived(fd, start) // a failure leaves drain to its holder scan
	return &Socket{name: name, kind: kind, network: network, address: address, origin: Inherited, fd: fd, sock: sock}
}

// Prepare builds, off the path of Listen, the listener or packet conn Listen
// will return for an inherited socket, and checks its options against cfg
// for its declared network (a mismatch is Listen's to report, as it may be
// only a warning).
func (s *Socket) Prepare(cfg *reuseport.Config) error {
	fd, err := linux.DupCloexec(s.fd)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), s.name)
	defer f.Close()
	if s.pre, err = wrapFile(f, s.kind, s.sock); err != nil {
		return err
	}
	if s.kind != Unix {
		s.checked, s.checkErr = s.network, cfg.Check(s.network, s.sock)
	}
	return nil
}

// Name, Kind, Network and Address are the socket's declaration (Address
// is the bound address once the table holds it).
func (s *Socket) Name() string    { return s.name }
func (s *Socket) Kind() Kind      { return s.kind }
func (s *Socket) Network() string { return s.network }
func (s *Socket) Address() string { return s.address }

// Origin says where the socket came from.
func (s *Socket) Origin() Origin { return s.origin }

// FD is the table's reference, valid until the table (or the Socket) is
// closed. Do not close it.
func (s *Socket) FD() int { return s.fd }

// Read is what reuseport read of the socket (nil for a unix socket not yet
// described).
func (s *Socket) Read() *reuseport.Socket { return s.sock }

// Close closes the table's reference and, if Listen never returned it, the
// prepared listener.
func (s *Socket) Close() {
	unix.Close(s.fd)
	closeObtained(s.pre)
	s.pre = nil
}

// describe records, once, what a successor is offered: the bound address
// and, for inet sockets, what reuseport read of it (from the caller's
// listener, or read now). Neither changes while we hold the socket: options
// are set before bind, and a bound socket stays bound.
func (s *Socket) describe(out *obtained) error {
	if s.sock == nil {
		s.sock = socketOf(out)
	}
	if s.sock == nil {
		so, err := reuseport.ReadFD(s.fd)
		if err != nil {
			return err
		}
		s.sock = so
	}
	if s.address == "" {
		s.address = s.sock.Address()
	}
	return nil
}

// obtained is a socket for the caller: a listener or a packet conn.
type obtained struct {
	ln net.Listener
	pc net.PacketConn
}

func closeObtained(o *obtained) {
	switch {
	case o == nil:
	case o.ln != nil:
		o.ln.Close()
	case o.pc != nil:
		o.pc.Close()
	}
}

// socketOf returns what reuseport read of the caller's socket, if it did.
func socketOf(out *obtained) *reuseport.Socket {
	switch {
	case out == nil:
	case out.ln != nil:
		if l, ok := out.ln.(*reuseport.Listener); ok {
			return l.Socket()
		}
	case out.pc != nil:
		if p, ok := out.pc.(*reuseport.PacketConn); ok {
			return p.Socket()
		}
	}
	return nil
}

// wrapFile makes the caller's listener or packet conn of a socket of kind
// from a file (a dup: f stays the caller's): a *reuseport.Listener or
// *reuseport.PacketConn for inet sockets, whatever their origin, with so
// (what reuseport read of the socket, or nil to read it); a
// *net.UnixListener that never unlinks its path for unix ones.
func wrapFile(f *os.File, kind Kind, so *reuseport.Socket) (*obtained, error) {
	out := &obtained{}
	if kind == UDP {
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return nil, err
		}
		udp, ok := pc.(*net.UDPConn)
		if !ok {
			pc.Close()
			return nil, fmt.Errorf("%T for a %s socket", pc, kind)
		}
		if out.pc, err = reuseport.NewPacketConn(udp, so); err != nil {
			pc.Close()
			return nil, err
		}
		return out, nil
	}
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, err
	}
	switch l := ln.(type) {
	case *net.UnixListener:
		if kind != Unix {
			break
		}
		l.SetUnlinkOnClose(false)
		out.ln = l
		return out, nil
	case *net.TCPListener:
		if kind != TCP {
			break
		}
		if out.ln, err = reuseport.NewListener(l, so); err != nil {
			l.Close()
			return nil, err
		}
		return out, nil
	}
	ln.Close()
	return nil, fmt.Errorf("%T for a %s socket", ln, kind)
}
