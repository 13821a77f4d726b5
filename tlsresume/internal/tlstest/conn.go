package tlstest

import (
	"bytes"
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
