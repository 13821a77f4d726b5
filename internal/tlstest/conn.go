package tlstest

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// TCPPair returns the two ends of a loopback TCP connection, with
// deadlines 30 s away; both are closed when the test ends.
func TCPPair(t testing.TB) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err = l.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	for _, c := range []net.Conn{a, b} {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	return a, b
}

// ExpectRead reads len(want) bytes from r and fails the test unless they
// are want.
func ExpectRead(t testing.TB, r io.Reader, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes that differ from the %d written", len(got), len(want))
	}
}

// Retry calls f until it returns nil, at most 400 times 5 ms apart, and
// returns its last error (nil once it succeeded).
func Retry(f func() error) error {
	var err error
	for i := 0; i < 400; i++ {
		if err = f(); err == nil {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return err
}

// Conn is a TLS record layer that can update its keys (a *tlsresume.Conn).
type Conn interface {
	net.Conn
	UpdateKeys(requestPeer bool) error
}

// Exchange runs, between the two ends of one session, writes in both
// directions (the client's split into records: three of TLS's maximum
// plaintext of 16 KiB and a part), then a KeyUpdate by the client that
// requests the server's, then one by the server alone, each followed by
// data read on the other side.
func Exchange(t testing.TB, client, server Conn) {
	t.Helper()
	big := make([]byte, 3*16384+17)
	rand.Read(big)
	go client.Write(big)
	ExpectRead(t, server, big)
	if _, err := server.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	ExpectRead(t, client, []byte("pong"))
	// The client asks for an update: the server answers with its own once
	// it reads the request.
	if err := client.UpdateKeys(true); err != nil {
		t.Fatal(err)
	}
	client.Write([]byte("after"))
	ExpectRead(t, server, []byte("after"))
	server.Write([]byte("reply"))
	ExpectRead(t, client, []byte("reply"))
	if err := server.UpdateKeys(false); err != nil {
		t.Fatal(err)
	}
	server.Write([]byte("again"))
	ExpectRead(t, client, []byte("again"))
}
