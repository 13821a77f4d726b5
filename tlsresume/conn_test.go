package tlsresume

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/tlstest"
)

// pipeConn is a net.Conn over byte buffers: Read drains in (io.EOF once
// empty), Write appends to out.
type pipeConn struct {
	net.Conn
	in  *bytes.Reader
	out bytes.Buffer
}

func (p *pipeConn) Read(b []byte) (int, error)       { return p.in.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error)      { return p.out.Write(b) }
func (p *pipeConn) Close() error                     { return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }

// states returns a client's and a server's State of one fresh session of
// suite, mirrored: each reads what the other writes.
func states(t testing.TB, suite uint16, seq uint64) (client, server *State) {
	s, err := suiteByID(suite)
	if err != nil {
		t.Fatal(err)
	}
	cs, ss := make([]byte, s.secretLen()), make([]byte, s.secretLen())
	rand.Read(cs)
	rand.Read(ss)
	dup := func(b []byte) []byte { return append([]byte(nil), b...) }
	client = &State{Suite: suite, ReadSecret: dup(ss), WriteSecret: dup(cs), ReadSeq: seq + 3, WriteSeq: seq}
	server = &State{Suite: suite, ReadSecret: dup(cs), WriteSecret: dup(ss), ReadSeq: seq, WriteSeq: seq + 3}
	return client, server
}

func newPair(t *testing.T, suite uint16) (client, server *Conn) {
	t.Helper()
	a, b := tlstest.TCPPair(t)
	cst, sst := states(t, suite, 1<<40)
	client, err := New(a, cst)
	if err != nil {
		t.Fatal(err)
	}
	server, err = New(b, sst)
	if err != nil {
		t.Fatal(err)
	}
	if cst.ReadSecret != nil || sst.WriteSecret != nil {
		t.Fatal("New left the secrets in the State")
	}
	return client, server
}

// allSuites are the suites this module continues by itself; the
// ChaCha20-Poly1305 cases run in the tlsresume/chacha module.
var allSuites = []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384}

// TestConnExchange: both directions, large writes split into records, and
// KeyUpdate initiated by either side, with and without a request.
func TestConnExchange(t *testing.T) {
	for _, suite := range allSuites {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) {
			client, server := newPair(t, suite)
			tlstest.Exchange(t, client, server)
			if client.in.seq != 1 || server.in.seq != 1 || client.out.seq != 1 {
				t.Fatalf("sequence numbers after the updates: client in %d out %d, server in %d", client.in.seq, client.out.seq, server.in.seq)
			}
			// close_notify is io.EOF.
			client.Close()
			if _, err := server.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("read after close_notify: %v, want io.EOF", err)
			}
			server.Close()
		})
	}
}

// sealed returns the bytes a Conn of st writes for the given writes.
func sealed(t testing.TB, st *State, writes ...[]byte) []byte {
	p := &pipeConn{in: bytes.NewReader(nil)}
	c, err := New(p, st)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if _, err := c.Write(w); err != nil {
			t.Fatal(err)
		}
	}
	return p.out.Bytes()
}

// readAll reads stream with a Conn of st, returning what it read and its
// error, and what it wrote back (alerts).
func readAll(t testing.TB, st *State, stream []byte) (got, wrote []byte, err error) {
	p := &pipeConn{in: bytes.NewReader(stream)}
	c, nerr := New(p, st)
	if nerr != nil {
		t.Fatal(nerr)
	}
	got, err = io.ReadAll(c)
	return got, p.out.Bytes(), err
}

// TestConnRejects: a tampered, replayed, reordered or dropped record ends the
// connection with bad_record_mac, sent to the peer, after the data of the
// records before it.
func TestConnRejects(t *testing.T) {
	recs := func(stream []byte) [][]byte {
		var out [][]byte
		for len(stream) > 0 {
			n := recordHeaderLen + (int(stream[3])<<8 | int(stream[4]))
			out = append(out, stream[:n])
			stream = stream[n:]
		}
		return out
	}
	cases := map[string]func(r [][]byte) []byte{
		"tampered": func(r [][]byte) []byte {
			x := bytes.Clone(r[1])
			x[len(x)-20] ^= 1
			return bytes.Join([][]byte{r[0], x, r[2]}, nil)
		},
		"replayed":  func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[1], r[1], r[2]}, nil) },
		"reordered": func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[2], r[1]}, nil) },
		"dropped":   func(r [][]byte) []byte { return bytes.Join([][]byte{r[0], r[2]}, nil) },
		"header": func(r [][]byte) []byte {
			x := bytes.Clone(r[1])
			x[4]--
			return bytes.Join([][]byte{r[0], x[:len(x)-1]}, nil)
		},
	}
	for name, mangle := range cases {
		t.Run(name, func(t *testing.T) {
			cst, sst := states(t, tls.TLS_AES_128_GCM_SHA256, 7)
			stream := sealed(t, cst, []byte("one"), []byte("two"), []byte("three"))
			got, wrote, err := readAll(t, sst, mangle(recs(stream)))
			var ae *AlertError
			if !errors.As(err, &ae) || ae.Alert != alertBadRecordMAC || ae.Remote {
				t.Fatalf("read error %v, want a bad_record_mac alert sent", err)
			}
			want := "one"
			if name == "replayed" {
				want = "onetwo"
			}
			if string(got) != want {
				t.Fatalf("read %q before the bad record, want %q", got, want)
			}
			if len(wrote) == 0 {
				t.Fatal("no alert sent")
			}
		})
	}
}

// TestConnAlerts: an alert from the peer is an *AlertError with Remote set;
// a record of another outer type or a handshake message other than
// KeyUpdate is refused with unexpected_message.
func TestConnAlerts(t *testing.T) {
	cst, sst := states(t, tls.TLS_AES_128_GCM_SHA256, 0)
	p := &pipeConn{in: bytes.NewReader(nil)}
	c, _ := New(p, cst)
	c.fatal(alertIllegalParameter, nil)
	_, _, err := readAll(t, sst, p.out.Bytes())
	var ae *AlertError
	if !errors.As(err, &ae) || !ae.Remote || ae.Alert != alertIllegalParameter {
		t.Fatalf("read error %v, want illegal_parameter received", err)
	}

	cst, sst = states(t, tls.TLS_AES_128_GCM_SHA256, 0)
	p = &pipeConn{in: bytes.NewReader(nil)}
	c, _ = New(p, cst)
	c.sendLocked(typeHandshake, []byte{4, 0, 0, 1, 0}) // a NewSessionTicket, from a client
	_, _, err = readAll(t, sst, p.out.Bytes())
	if !errors.As(err, &ae) || ae.Remote || ae.Alert != alertUnexpectedMessage {
		t.Fatalf("read error %v, want unexpected_message sent", err)
	}

	_, sst = states(t, tls.TLS_AES_128_GCM_SHA256, 0)
	_, _, err = readAll(t, sst, []byte{typeHandshake, 3, 3, 0, 1, 0})
	if !errors.As(err, &ae) || ae.Alert != alertUnexpectedMessage {
		t.Fatalf("read error %v, want unexpected_message sent", err)
	}
}

// TestStateMarshal: a State survives its encoding, and a truncated one is
// refused.
func TestStateMarshal(t *testing.T) {
	_, st := states(t, tls.TLS_AES_256_GCM_SHA384, 99)
	st.Unread = []byte{23, 3, 3}
	st.ServerName, st.NegotiatedProtocol = "localhost", "http/1.1"
	b, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got State
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Suite != st.Suite || got.ReadSeq != st.ReadSeq || got.WriteSeq != st.WriteSeq ||
		!bytes.Equal(got.ReadSecret, st.ReadSecret) || !bytes.Equal(got.WriteSecret, st.WriteSecret) || !bytes.Equal(got.Unread, st.Unread) || got.ServerName != st.ServerName || got.NegotiatedProtocol != st.NegotiatedProtocol {
		t.Fatalf("round trip changed the state")
	}
	for i := range b {
		if err := new(State).UnmarshalBinary(b[:i]); !errors.Is(err, ErrBadState) {
			t.Fatalf("%d of %d bytes: %v, want ErrBadState", i, len(b), err)
		}
	}
	got.Zero()
	if got.ReadSecret != nil {
		t.Fatal("Zero kept the secret")
	}
}

// FuzzRead: whatever bytes arrive, the record layer returns only a prefix of
// what the peer's Conn wrote (no forged, replayed or reordered record gets
// through) and never panics or loops.
func FuzzRead(f *testing.F) {
	msgs := [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), bytes.Repeat([]byte{'x'}, 300), {}, []byte("tail")}
	want := bytes.Join(msgs, nil)
	mk := func() (*State, *State) {
		s, _ := suiteByID(tls.TLS_AES_128_GCM_SHA256)
		cs, ss := bytes.Repeat([]byte{1}, s.secretLen()), bytes.Repeat([]byte{2}, s.secretLen())
		return &State{Suite: s.id, ReadSecret: ss, WriteSecret: cs, WriteSeq: 5},
			&State{Suite: s.id, ReadSecret: bytes.Clone(cs), WriteSecret: bytes.Clone(ss), ReadSeq: 5}
	}
	cst, _ := mk()
	f.Add(sealed(f, cst, msgs...))
	f.Add([]byte{23, 3, 3, 0, 0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		_, sst := mk()
		got, _, _ := readAll(t, sst, stream)
		if !bytes.HasPrefix(want, got) {
			t.Fatalf("read %q, not a prefix of what was sent", got)
		}
	})
}

// TestConnExport: a Conn exported mid-session (with application data its
// reader had not consumed, and a record half read) goes on in a new Conn:
// the peer notices nothing, and the old Conn no longer reads or writes.
// (With ChaCha20-Poly1305: in the tlsresume/chacha module.)
func TestConnExport(t *testing.T) {
	client, server := newPair(t, tls.TLS_AES_256_GCM_SHA384)
	client.Write([]byte("hello world"))
	tlstest.ExpectRead(t, server, []byte("hello"))
	if err := client.UpdateKeys(true); err != nil {
		t.Fatal(err)
	}
	// Half a record arrives: the server's Read times out with it read.
	rec := sealedBy(t, client, []byte("-next"))
	client.conn.Write(rec[:7])
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
	if _, err := server.Write([]byte("x")); err == nil {
		t.Fatal("exported Conn still writes")
	}
	raw.SetDeadline(time.Now().Add(30 * time.Second))
	next, err := New(raw, st)
	if err != nil {
		t.Fatal(err)
	}
	client.conn.Write(rec[7:])
	tlstest.ExpectRead(t, next, []byte("(was read)-next"))
	next.Write([]byte("reply"))
	tlstest.ExpectRead(t, client, []byte("reply"))
	server.Close() // closes nothing: the socket is next's
	next.Write([]byte("still"))
	tlstest.ExpectRead(t, client, []byte("still"))
}

// sealedBy returns the record c would write for p, advancing its sequence
// number as if written.
func sealedBy(t *testing.T, c *Conn, p []byte) []byte {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, err := c.sealLocked(nil, typeApplication, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConnCloseBreaksWrite: Close while a Write is blocked (the peer reads
// nothing) returns, and the Write fails, as with tls.Conn.
func TestConnCloseBreaksWrite(t *testing.T) {
	_, server := newPair(t, tls.TLS_AES_128_GCM_SHA256)
	werr := make(chan error, 1)
	go func() {
		big := make([]byte, 64<<20) // more than the socket buffers hold
		_, err := server.Write(big)
		werr <- err
	}()
	// Wait (bounded) until the Write holds the lock, blocked in the socket.
	for i := 0; server.wmu.TryLock(); i++ {
		server.wmu.Unlock()
		if i > 2000 {
			t.Fatal("Write never began")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { server.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close blocked behind the Write")
	}
	if err := <-werr; err == nil {
		t.Fatal("the blocked Write succeeded")
	}
}
