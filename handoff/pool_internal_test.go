package handoff

import (
	"context"
	"net"
	"slices"
	"testing"
)

// Two pool workers with the same pid (in different PID namespaces: two
// containers sharing the pool directory) each have a socket of their own,
// each answering for itself, and each finds the other's. (Both picked
// <pid>.sock, and the second renamed its socket over the first's.)
func TestPoolSocketNames(t *testing.T) {
	dir := t.TempDir()
	drop := func(pc PassedConn) { pc.Conn.Close() }
	cfg := ConnsConfig{Addrs: map[string]net.Addr{"a": &net.TCPAddr{Port: 80}, "b": &net.TCPAddr{Port: 80}}}
	a, err := JoinPool(dir, cfg, map[string]func(PassedConn){"a": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := JoinPool(dir, cfg, map[string]func(PassedConn){"b": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.self == b.self {
		t.Fatalf("both workers listen on %s", a.self)
	}
	for _, w := range []struct {
		p, other *Pool
		takes    string
	}{{a, b, "a"}, {b, a, "b"}} {
		if got := w.other.candidates(); !slices.Equal(got, []string{w.p.self}) {
			t.Errorf("the other worker's candidates %v, want [%s]", got, w.p.self)
		}
		s, err := DialConns(context.Background(), w.p.self, ConnsConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Takes(w.takes) {
			t.Errorf("%s: its dial reached another listener", w.p.self)
		}
		s.Close()
	}
}
