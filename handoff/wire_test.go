package handoff

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want error
	}{
		{"short header", []byte{0, 0}, ErrTruncated},
		{"short body", rawFrame(10, `{"type"`), ErrTruncated},
		{"oversized", rawFrame(MaxFrame+1, ""), ErrFrameTooLarge},
		{"empty", rawFrame(0, ""), ErrProtocol},
		{"not json", rawFrame(3, "abc"), ErrProtocol},
		{"unknown type", rawFrame(14, `{"type":"xyz"}`), ErrProtocol},
		{"hello without pid", rawFrame(40, `{"type":"hello","role":"successor"}     `), ErrProtocol},
		{"fds batch too big", rawFrame(27, `{"type":"fds","count":254} `), ErrProtocol},
		{"bad kind", rawFrame(92, `{"type":"offer","sockets":[{"name":"a","kind":"tcp-listener","network":"udp","address":""}]}`), ErrProtocol},
		{"connection in an offer", body(`{"type":"offer","sockets":[{"name":"a","kind":"tcp-conn","network":"tcp4","address":""}]}`), ErrProtocol},
		{"conns count mismatch", body(`{"type":"conns","count":2,"conns":[{"name":"a","kind":"tcp-conn","network":"tcp4","address":"","peer":""}]}`), ErrProtocol},
		{"conns unknown key", body(`{"type":"conns","count":1,"conns":[{"name":"a","kind":"tcp-conn","network":"tcp4","address":"","peer":"","fd":3}]}`), ErrProtocol},
		{"conns listener kind", body(`{"type":"conns","count":1,"conns":[{"name":"a","kind":"tcp-listener","network":"tcp4","address":"","peer":""}]}`), ErrProtocol},
		{"max_version not above version", body(`{"type":"hello","role":"successor","pid":1,"version":2,"max_version":2}`), ErrProtocol},
	} {
		_, err := decode(tc.in)
		var fe *FrameError
		if !errors.Is(err, tc.want) || !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *FrameError matching %v", tc.name, err, tc.want)
		}
	}
}

// body frames a payload with its exact length.
func body(s string) []byte { return rawFrame(uint32(len(s)), s) }

func TestEncodeDecode(t *testing.T) {
	fs := []*frame{
		{Type: typeHello, Version: Version, Role: roleSuccessor, PID: 7, UID: 1000, Generation: 3},
		{Type: typeOffer, Sockets: []socketInfo{{Name: "http", Kind: kindTCP, Network: "tcp", Address: "[::]:80", Digest: "sha256:0123456789abcdef"}, {Name: "u", Kind: kindUnix, Network: "unix", Address: "/run/x.sock"}}},
		{Type: typeFDs, First: 253, Count: 253},
		{Type: typeAck, Received: 506},
		{Type: typeReady, Generation: 4},
		{Type: typeReady, Generation: 4, Takes: []string{"http", "https"}},
		{Type: typeHello, Version: 1, MaxVersion: Version, Role: roleSuccessor, PID: 7},
		{Type: typeConns, First: 253, Count: 2, Conns: []connDecl{
			{socketInfo: socketInfo{Name: "http", Kind: kindTCPConn, Network: "tcp4", Address: "127.0.0.1:80"}, Peer: "127.0.0.1:5000", State: []byte("GET")},
			{socketInfo: socketInfo{Name: "http", Kind: kindTCPConn, Network: "tcp6", Address: "[::1]:80"}, Peer: "[::1]:5001"}}},
		{Type: typeDone, Generation: 4},
		{Type: typeError, Code: codeInProgress, Message: "busy"},
	}
	for _, f := range fs {
		b, err := encodeFrame(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(b)
		if err != nil || !reflect.DeepEqual(got, f) {
			t.Fatalf("decode(encode(%+v)) = %+v, %v", f, got, err)
		}
	}
	many := &frame{Type: typeOffer}
	for i := range MaxSockets + 1 {
		many.Sockets = append(many.Sockets, socketInfo{Name: strings.Repeat("n", 10) + itoa(i), Kind: kindUDP, Network: "udp"})
	}
	b, err := encodeFrame(many)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode(b); !errors.Is(err, ErrProtocol) {
		t.Fatalf("offer of %d sockets: %v", MaxSockets+1, err)
	}
}

// FuzzDecode: the decoder never panics, every error is a *FrameError, and
// whatever it accepts means the same after a round trip: it re-encodes to a
// frame that decodes to an equal value (an empty list equals an absent one,
// as the encoder omits both), and that encoding is a fixed point. The seed
// corpus is in testdata/fuzz/FuzzDecode and runs with every go test.
func FuzzDecode(f *testing.F) {
	f.Add(rawFrame(0xffffffff, ""))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decode(b)
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		again, err := encodeFrame(fr)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		fr2, err := decode(again)
		if err != nil || !reflect.DeepEqual(canonical(fr), canonical(fr2)) {
			t.Fatalf("round trip: %+v -> %q -> %+v %v", fr, again, fr2, err)
		}
		third, err := encodeFrame(fr2)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("encoding not a fixed point: %q -> %q %v", again, third, err)
		}
	})
}

// canonical returns a copy of f with an empty socket list made nil: both are
// encoded as no "sockets" key.
func canonical(f *frame) frame {
	c := *f
	if len(c.Sockets) == 0 {
		c.Sockets = nil
	}
	return c
}

// Keys match exactly and once: encoding/json alone matches them
// case-insensitively and lets the last duplicate win, so that a peer could
// smuggle "TYPE":"error" past a reader of "type". A generation of 2^64-1
// would wrap the successor's to 0.
func TestStrictDecoding(t *testing.T) {
	hello := `"version":1,"role":"successor","pid":1`
	sock := `"name":"a","kind":"udp","network":"udp"`
	for _, tc := range []struct {
		name, body, detail string
	}{
		{"other case overrides", `{"type":"hello",` + hello + `,"TYPE":"error","code":"internal"}`, `unknown key "TYPE"`},
		{"duplicate type", `{"type":"hello",` + hello + `,"type":"error","code":"internal"}`, `duplicate key "type"`},
		{"key in other case", `{"Type":"ready"}`, `unknown key "Type"`},
		{"unknown key", `{"type":"ready","extra":1}`, `unknown key "extra"`},
		{"unknown key in a socket", `{"type":"offer","sockets":[{` + sock + `,"Name":"b"}]}`, `unknown key "Name"`},
		{"duplicate key in a socket", `{"type":"offer","sockets":[{` + sock + `,"name":"b"}]}`, `duplicate key "name"`},
		{"socket not an object", `{"type":"offer","sockets":[[1]]}`, `where an object belongs`},
		{"generation wraps", `{"type":"hello","version":1,"role":"predecessor","pid":1,"generation":18446744073709551615}`, "would wrap"},
		{"ready wraps", `{"type":"ready","generation":18446744073709551615}`, "would wrap"},
	} {
		_, err := decode(rawFrame(uint32(len(tc.body)), tc.body))
		var fe *FrameError
		if !errors.As(err, &fe) || !errors.Is(err, ErrProtocol) || !strings.Contains(fe.Detail, tc.detail) {
			t.Errorf("%s: decode(%s) = %v, want a *FrameError of ErrProtocol saying %s", tc.name, tc.body, err, tc.detail)
		}
	}
	// Exact keys still decode, also when written with JSON escapes, and
	// the largest generation whose successor's fits is accepted.
	for _, body := range []string{
		`{"typ\u0065":"ready","generation":2}`,
		`{"type":"offer","sockets":null}`,
		`{"type":"offer","sockets":[{` + sock + `}]}`,
		`{"type":"hello","version":1,"role":"predecessor","pid":1,"generation":18446744073709551614}`,
	} {
		if _, err := decode(rawFrame(uint32(len(body)), body)); err != nil {
			t.Errorf("decode(%s): %v", body, err)
		}
	}
}
