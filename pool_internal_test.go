package zerodrop

import (
	"context"
	"net"
	"slices"
	"testing"

	"github.com/zerodrop/zerodrop/handoff"
)

// Two pool workers with the same pid (in different PID namespaces: two
// containers sharing the pool directory) each have a socket of their own,
// each answering for itself, and each finds the other's. (Both picked
// <pid>.sock, and the second renamed its socket over the first's.)
func TestPoolSocketNames(t *testing.T) {
	dir := t.TempDir()
	drop := func(pc handoff.PassedConn) { pc.Conn.Close() }
	cfg := handoff.ConnsConfig{Addrs: map[string]net.Addr{"a": &net.TCPAddr{Port: 80}, "b": &net.TCPAddr{Port: 80}}}
	a, err := listenSiblings(dir, cfg, map[string]func(handoff.PassedConn){"a": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := listenSiblings(dir, cfg, map[string]func(handoff.PassedConn){"b": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	if a.self == b.self {
		t.Fatalf("both workers listen on %s", a.self)
	}
	for _, w := range []struct {
		p, other *siblings
		takes    string
	}{{a, b, "a"}, {b, a, "b"}} {
		if got := w.other.candidates(); !slices.Equal(got, []string{w.p.self}) {
			t.Errorf("the other worker's candidates %v, want [%s]", got, w.p.self)
		}
		s, err := handoff.DialConns(context.Background(), w.p.self, handoff.ConnsConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if !s.Takes(w.takes) {
			t.Errorf("%s: its dial reached another listener", w.p.self)
		}
		s.Close()
	}
}
