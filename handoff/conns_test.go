package handoff

import (
	"errors"
	"net"
	"testing"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestValidateConn: a connected TCP socket passes as declared, also once its
// client has closed (CLOSE_WAIT); every mismatch is a *ValidationError naming
// the check: a listener, a UDP socket, another family, another local or peer
// address, a wildcard port.
func TestValidateConn(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		client, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer server.Close()
		pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		local, peer := server.LocalAddr().String(), server.RemoteAddr().String()
		decl := func(network, address, peer string) *connDecl {
			return &connDecl{socketInfo: socketInfo{Name: "c", Kind: kindTCPConn, Network: network, Address: address}, Peer: peer}
		}
		validateOn := func(sc net.Conn, d *connDecl) (err error) {
			if cerr := linux.Control(sc.(*net.TCPConn), func(fd int) error { _, err = validateConn(fd, d); return nil }); cerr != nil {
				t.Fatal(cerr)
			}
			return err
		}
		if err := validateOn(server, decl("tcp4", local, peer)); err != nil {
			t.Errorf("the connection as declared: %v", err)
		}
		for _, c := range []struct {
			name, check string
			fd          func(func(int) error) error
			d           *connDecl
		}{
			{"a listener", "TCP_INFO", func(f func(int) error) error { return linux.Control(ln.(*net.TCPListener), f) }, decl("tcp4", ln.Addr().String(), peer)},
			{"a UDP socket", "TCP_INFO", func(f func(int) error) error { return linux.Control(pc.(*net.UDPConn), f) }, decl("tcp4", pc.LocalAddr().String(), peer)},
			{"another family", "family", nil, decl("tcp6", local, peer)},
			{"another peer", "getpeername", nil, decl("tcp4", local, "127.0.0.1:1")},
			{"another local address", "getsockname", nil, decl("tcp4", "127.0.0.2:"+portOf(local), peer)},
			{"a wildcard peer port", "getpeername", nil, decl("tcp4", local, "127.0.0.1:0")},
		} {
			fd := c.fd
			if fd == nil {
				fd = func(f func(int) error) error { return linux.Control(server.(*net.TCPConn), f) }
			}
			var err error
			if cerr := fd(func(fd int) error { _, err = validateConn(fd, c.d); return nil }); cerr != nil {
				t.Fatal(cerr)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, ErrValidation) || ve.Check != c.check {
				t.Errorf("%s: %v, want a *ValidationError of check %s", c.name, err, c.check)
			}
		}
		client.Close() // the server's side is in CLOSE_WAIT now
		if _, err := server.Read(make([]byte, 1)); err == nil {
			t.Fatal("read after the client's close succeeded")
		}
		if err := validateOn(server, decl("tcp4", local, peer)); err != nil {
			t.Errorf("in CLOSE_WAIT: %v", err)
		}
	})
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
