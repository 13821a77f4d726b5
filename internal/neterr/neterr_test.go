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
