package neterr

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestOp(t *testing.T) {
	cause := os.NewSyscallError("bind", syscall.EADDRINUSE)
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80}
	err := Op("listen", "tcp4", addr, cause)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "listen" || oe.Net != "tcp4" || oe.Addr != addr || !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Op = %#v, want a *net.OpError listen tcp4 %s wrapping EADDRINUSE", err, addr)
	}
	if got, want := err.Error(), "listen tcp4 127.0.0.1:80: bind: address already in use"; got != want {
		t.Errorf("Op = %q, want %q", got, want)
	}
	// Wrapped once: the same op again returns the error as it is.
	if again := Op("listen", "tcp4", addr, err); again != err {
		t.Errorf("Op of an Op error = %q, want it unchanged", again)
	}
	// Another op wraps it.
	if outer := Op("handoff", "unix", nil, err); outer == err || outer.Error() != "handoff unix: "+err.Error() {
		t.Errorf("Op(handoff) = %q", outer)
	}
	if Op("listen", "tcp", addr, nil) != nil {
		t.Error("Op of nil is not nil")
	}
}

func TestOpText(t *testing.T) {
	err := OpText("listen", "tcp", "no-such-host:http", errors.New("bad"))
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Addr.String() != "no-such-host:http" || oe.Addr.Network() != "tcp" || err.Error() != "listen tcp no-such-host:http: bad" {
		t.Errorf("OpText = %q", err)
	}
	if err := OpText("open", "tcp", "", errors.New("bad")); err.Error() != "open tcp: bad" {
		t.Errorf("OpText without address = %q", err)
	}
}

func TestOpConn(t *testing.T) {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 40000}
	c := addrConn{local: local, remote: remote}
	cause := errors.New("taken")
	err := OpConn("write", "tcp", c, cause)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || oe.Net != "tcp" || oe.Source != local || oe.Addr != remote || !errors.Is(err, cause) {
		t.Fatalf("OpConn = %#v, want a *net.OpError write tcp from %s to %s wrapping %v", err, local, remote, cause)
	}
	// The net package's own shape: op, net, source->addr, cause.
	if got, want := err.Error(), "write tcp 127.0.0.1:8080->127.0.0.2:40000: taken"; got != want {
		t.Errorf("OpConn = %q, want %q", got, want)
	}
	if again := OpConn("write", "tcp", c, err); again != err {
		t.Errorf("OpConn of an OpConn error = %q, want it unchanged", again)
	}
	if again := Op("write", "tcp", remote, err); again != err {
		t.Errorf("Op of an OpConn error for the same op = %q, want it unchanged", again)
	}
	if outer := OpConn("detach", "tcp", c, err); outer == err || !errors.Is(outer, cause) {
		t.Errorf("OpConn(detach) of a write error = %q, want it wrapped", outer)
	}
	if OpConn("write", "tcp", c, nil) != nil {
		t.Error("OpConn of nil is not nil")
	}
}

// addrConn is a net.Conn that only has addresses.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }
