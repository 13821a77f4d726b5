package chacha_test

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/tlstest"
	"github.com/zerodrop/zerodrop/tlsresume"
	_ "github.com/zerodrop/zerodrop/tlsresume/chacha"
)

// These are tlsresume's TestConnExchange and TestConnExport in
// TLS_CHACHA20_POLY1305_SHA256, through the public API (tlsresume's
// module does not require x/crypto, so they cannot run there).

const suite = tls.TLS_CHACHA20_POLY1305_SHA256

// holdConn is a socket whose writes can be held back (kept in held) instead
// of sent.
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	held []byte
}

func (h *holdConn) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hold {
		h.held = append(h.held, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}

// newPair returns two Conns of one fresh ChaCha20-Poly1305 session, each
// reading what the other writes; the client's socket is a holdConn.
func newPair(t *testing.T) (client, server *tlsresume.Conn, hold *holdConn) {
	t.Helper()
	a, b := tlstest.TCPPair(t)
	cs, ss := make([]byte, 32), make([]byte, 32)
	rand.Read(cs)
	rand.Read(ss)
	seq := uint64(1 << 40)
	cst := &tlsresume.State{Suite: suite, ReadSecret: bytes.Clone(ss), WriteSecret: bytes.Clone(cs), ReadSeq: seq + 3, WriteSeq: seq}
	sst := &tlsresume.State{Suite: suite, ReadSecret: cs, WriteSecret: ss, ReadSeq: seq, WriteSeq: seq + 3}
	hold = &holdConn{Conn: a}
	client, err := tlsresume.New(hold, cst)
	if err != nil {
		t.Fatal(err)
	}
	server, err = tlsresume.New(b, sst)
	if err != nil {
		t.Fatal(err)
	}
	if cst.ReadSecret != nil || sst.WriteSecret != nil {
		t.Fatal("New left the secrets in the State")
	}
	if got := server.ConnectionState().CipherSuite; got != suite {
		t.Fatalf("suite %#04x, want %#04x", got, suite)
	}
	return client, server, hold
}

// TestConnExchange: both directions, large writes split into records, and
// KeyUpdate initiated by either side, with and without a request; the
// sequence numbers after the updates (read from exported States), and
// close_notify as io.EOF in the Conns continued from them.
func TestConnExchange(t *testing.T) {
	client, server, _ := newPair(t)
	tlstest.Exchange(t, client, server)
	craw, cst, err := client.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	sraw, sst, err := server.Export(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cst.ReadSeq != 1 || sst.ReadSeq != 1 || cst.WriteSeq != 1 {
		t.Fatalf("sequence numbers after the updates: client in %d out %d, server in %d", cst.ReadSeq, cst.WriteSeq, sst.ReadSeq)
	}
	client, err = tlsresume.New(craw, cst)
	if err != nil {
		t.Fatal(err)
	}
	server, err = tlsresume.New(sraw, sst)
	if err != nil {
		t.Fatal(err)
	}
	// close_notify is io.EOF.
	client.Close()
	if _, err := server.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after close_notify: %v, want io.EOF", err)
	}
	server.Close()
}

// TestConnExport: a Conn exported mid-session (with application data its
// reader had not consumed, and a record half read) goes on in a new Conn:
// the peer notices nothing, and the old Conn no longer reads or writes.
func TestConnExport(t *testing.T) {
	client, server, hold := newPair(t)
	client.Write([]byte("hello world"))
	tlstest.ExpectRead(t, server, []byte("hello"))
	if err := client.UpdateKeys(true); err != nil {
		t.Fatal(err)
	}
	// The client's next record is held back; half of it arrives: the
	// server's Read times out with it read.
	hold.mu.Lock()
	hold.hold = true
	hold.mu.Unlock()
	client.Write([]byte("-next"))
	hold.mu.Lock()
	hold.hold = false
	rec := hold.held
	hold.mu.Unlock()
	if len(rec) < 8 {
		t.Fatalf("held %d bytes, want one record", len(rec))
	}
	hold.Conn.Write(rec[:7])
	server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	buf := make([]byte, 6)
	if n, err := io.ReadFull(server, buf); n != 6 || err != nil {
		t.Fatalf("read %d: %v", n, err)
	}
	if _, err := server.Read(buf); err == nil {
		t.Fatal("read past the half record")
	}
	raw, st, err := server.Export([]byte("(was read)"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Suite != suite {
		t.Fatalf("exported suite %#04x", st.Suite)
	}
	if _, err := server.Write([]byte("x")); err == nil {
		t.Fatal("exported Conn still writes")
	}
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	next, err := tlsresume.New(raw, st)
	if err != nil {
		t.Fatal(err)
	}
	hold.Conn.Write(rec[7:])
	tlstest.ExpectRead(t, next, []byte("(was read)-next"))
	next.Write([]byte("reply"))
	tlstest.ExpectRead(t, client, []byte("reply"))
	server.Close() // closes nothing: the socket is next's
	next.Write([]byte("still"))
	tlstest.ExpectRead(t, client, []byte("still"))
}
