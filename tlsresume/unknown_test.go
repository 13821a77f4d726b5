package tlsresume

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"testing"
)

// synthetic drives a Recorder by hand: a ClientHello and a request read,
// then what the server's Conn (out) writes through it.
type synthetic struct {
	rec *Recorder
	out *Conn
	buf *pipeConn
}

func newSynthetic(t *testing.T) *synthetic {
	var capture Capture
	var random [32]byte
	rand.Read(random[:])
	cst, sst := states(t, tls.TLS_AES_128_GCM_SHA256, 0)
	cst.ReadSeq, sst.WriteSeq = 0, 0
	fmt.Fprintf(&capture, "CLIENT_TRAFFIC_SECRET_0 %s %s\n", hex.EncodeToString(random[:]), hex.EncodeToString(cst.WriteSecret))
	fmt.Fprintf(&capture, "SERVER_TRAFFIC_SECRET_0 %s %s\n", hex.EncodeToString(random[:]), hex.EncodeToString(sst.WriteSecret))
	hello := append([]byte{1, 0, 0, 38, 3, 3}, random[:]...)
	stream := append([]byte{typeHandshake, 3, 1, 0, byte(len(hello))}, hello...)
	stream = append(stream, sealed(t, cst, []byte("GET / HTTP/1.1\r\n\r\n"))...)
	buf := &pipeConn{in: bytes.NewReader(stream)}
	rec := capture.Wrap(buf)
	if _, err := io.ReadAll(rec); err != nil {
		t.Fatal(err)
	}
	out, err := New(&pipeConn{in: bytes.NewReader(nil)}, sst)
	if err != nil {
		t.Fatal(err)
	}
	return &synthetic{rec: rec, out: out, buf: buf}
}

// write passes what the server's Conn writes in f through the Recorder.
func (s *synthetic) write(t *testing.T, f func(c *Conn)) {
	p := s.out.conn.(*pipeConn)
	p.out.Reset()
	f(s.out)
	if _, err := s.rec.Write(p.out.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// prove runs ProveIdleHTTP as if net/http waited for the next request.
func (s *synthetic) prove() error {
	s.rec.mu.Lock()
	s.rec.idle, s.rec.deadlines, s.rec.inRead = true, 1, true
	s.rec.mu.Unlock()
	return s.rec.ProveIdleHTTP()
}

// TestUnknownKeyUpdate: a KeyUpdate of ours that the Recorder cannot follow
// (padded beyond the records it opens) makes the connection unprovable,
// whether it is the last record written or records follow it; the same
// KeyUpdate unpadded is followed and proven.
func TestUnknownKeyUpdate(t *testing.T) {
	response := func(c *Conn) { c.Write([]byte("HTTP/1.1 200 OK\r\n\r\n")) }
	update := func(pad int) func(c *Conn) {
		return func(c *Conn) {
			c.padding = pad
			c.UpdateKeys(false)
			c.padding = 0
		}
	}
	more := func(c *Conn) { c.Write([]byte("x")) }
	for _, tc := range []struct {
		name   string
		writes []func(*Conn)
		proven bool
	}{
		{"followed", []func(*Conn){response, update(0)}, true},
		{"followed-more", []func(*Conn){response, update(0), more}, true},
		{"padded-last", []func(*Conn){response, update(2 * smallWrite)}, false},
		{"padded-more", []func(*Conn){response, update(2 * smallWrite), more}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynthetic(t)
			for _, w := range tc.writes {
				s.write(t, w)
			}
			err := s.prove()
			t.Logf("%v", err)
			if tc.proven != (err == nil) || (err != nil && !errors.Is(err, ErrNotProven)) {
				t.Fatalf("ProveIdleHTTP: %v, want proven %v", err, tc.proven)
			}
		})
	}
}
