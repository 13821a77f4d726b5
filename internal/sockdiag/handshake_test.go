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
