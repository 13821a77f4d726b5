package handoff

import (
	"context"
	"errors"
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

// A worker alone in its pool directory: PassConns (the probe a drain makes
// with no connection) finds no sibling, with a *PoolError that matches
// ErrNotTaken; with a sibling that takes the listener, it finds one, and a
// sibling that takes other listeners only is skipped.
func TestPoolNoSibling(t *testing.T) {
	dir := t.TempDir()
	drop := func(pc PassedConn) { pc.Conn.Close() }
	cfg := ConnsConfig{Addrs: map[string]net.Addr{"a": &net.TCPAddr{Port: 80}, "b": &net.TCPAddr{Port: 80}}}
	a, err := JoinPool(dir, cfg, map[string]func(PassedConn){"a": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	_, err = a.PassConns(ctx, "a", nil)
	var pe *PoolError
	if !errors.Is(err, ErrNotTaken) || !errors.As(err, &pe) || pe.Listener != "a" || pe.Dir != dir {
		t.Fatalf("alone: %v, want a *PoolError for a matching ErrNotTaken", err)
	}
	b, err := JoinPool(dir, cfg, map[string]func(PassedConn){"b": drop})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.PassConns(ctx, "a", nil); !errors.Is(err, ErrNotTaken) {
		t.Errorf("with a sibling taking only b: %v, want ErrNotTaken", err)
	}
	if _, err := a.PassConns(ctx, "b", nil); err != nil {
		t.Errorf("with a sibling taking b: %v", err)
	}
	b.StopListening()
	a.Close() // drops the sender to b
	if _, err := b.PassConns(ctx, "a", nil); !errors.Is(err, ErrNotTaken) {
		t.Errorf("once a closed: %v, want ErrNotTaken", err)
	}
}
