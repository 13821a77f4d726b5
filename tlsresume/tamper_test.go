package tlsresume

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// tamperProxy forwards one connection to addr; once armed, it flips a bit
// in the last byte (a record's tag) of the next chunk from the client.
type tamperProxy struct {
	addr  string
	armed atomic.Bool
}

func startTamperProxy(t *testing.T, to string) *tamperProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{addr: l.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		s, err := net.Dial("tcp", to)
		if err != nil {
			return
		}
		defer s.Close()
		go func() { io.Copy(struct{ io.Writer }{c}, s); c.Close() }() // no splice: its pipes outlive the test
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 && p.armed.CompareAndSwap(true, false) {
				buf[n-1] ^= 1
			}
			if n > 0 {
				if _, err := s.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				s.(*net.TCPConn).CloseWrite()
				return
			}
		}
	}()
	return p
}

// TestTamperedAfterHandOver: a record changed on the wire after the
// handover is refused: the client gets a bad_record_mac alert and the
// connection closes.
func TestTamperedAfterHandOver(t *testing.T) {
	netnstest.CheckLeaks(t)
	s := startTLSServer(t, "first")
	p := startTamperProxy(t, s.Addr)
	tc, err := tls.Dial("tcp", p.addr, &tls.Config{RootCAs: s.Cert.Pool, ServerName: "localhost", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(tc)
	request := func(path string) (*http.Response, error) {
		if _, err := io.WriteString(tc, "GET "+path+" HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, nil)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	if _, err := request("/one"); err != nil {
		t.Fatal(err)
	}
	r := s.Rec(t, 0)
	raw, st := tlstest.Take(t, r)
	conn, err := New(raw, st)
	if err != nil {
		t.Fatal(err)
	}
	tlstest.Successor(t) <- conn
	if _, err := request("/two"); err != nil {
		t.Fatalf("untampered request after the handover: %v", err)
	}
	p.armed.Store(true)
	_, err = request("/three")
	if err == nil || !strings.Contains(err.Error(), "bad record MAC") {
		t.Fatalf("tampered request: %v, want the server's bad_record_mac alert", err)
	}
	// The server closed: nothing more arrives.
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection still open after the alert")
	}
}
