//go:build linux

package sockdiag

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// A handshake held open by TCP_DEFER_ACCEPT (the listener ignores the bare
// final ACK, so the request socket waits for data) is listed on its port and
// only there, and leaves the list once the client sends.
func TestHandshakes(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s := listen(t, netip.MustParseAddrPort("127.0.0.1:0"), 8, "")
		other := listen(t, netip.MustParseAddrPort("127.0.0.1:0"), 8, "")
		if err := unix.SetsockoptInt(s.fd, unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 5); err != nil {
			t.Fatal(err)
		}
		c, err := net.DialTimeout("tcp4", s.addr.String(), 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		hs, err := Handshakes(s.addr.Port())
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != 1 || hs[0].Addr != s.addr || hs[0].Cookie == 0 {
			t.Fatalf("Handshakes(%d) = %+v, want one on %v", s.addr.Port(), hs, s.addr)
		}
		if hs, err := Handshakes(other.addr.Port()); err != nil || len(hs) != 0 {
			t.Fatalf("Handshakes(%d) = %+v, %v; want none", other.addr.Port(), hs, err)
		}
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			hs, err := Handshakes(s.addr.Port())
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the client's data, handshakes %+v", hs)
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// A handshake dump asks for SYN_RECV and NEW_SYN_RECV and keeps only those
// states: request sockets (reported as SYN_RECV) and fast-open children.
func TestParseHandshakes(t *testing.T) {
	if r := requestStates(unix.AF_INET, 80, handshakeStates, 1)[unix.SizeofNlMsghdr:]; native.Uint32(r[4:]) != 1<<3|1<<12 {
		t.Fatalf("states %#x, want SYN_RECV|NEW_SYN_RECV", native.Uint32(r[4:]))
	}
	h := Listener{Addr: netip.MustParseAddrPort("127.0.0.1:80"), Family: unix.AF_INET, Cookie: 77}
	var dgram []byte
	for _, state := range []uint8{tcpSynRecv, tcpListen, tcpNewSynRecv, 1, 200} {
		dgram = append(dgram, nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 2, diagMsg(h, state))...)
	}
	ls, _, err := parse(dgram, 2, unix.AF_INET, 80, handshakeStates, nil)
	if err != nil || len(ls) != 2 || ls[0].Cookie != 77 || ls[1].Cookie != 77 {
		t.Fatalf("parse = %+v, %v; want the SYN_RECV and NEW_SYN_RECV ones", ls, err)
	}
}
