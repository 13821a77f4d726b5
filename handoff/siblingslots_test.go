package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// someAddrs gives the listeners of the tests that pass no connection an
// address (ConnsConfig.Addrs).
var someAddrs = map[string]net.Addr{"http": &net.TCPAddr{Port: 80}, "first": &net.TCPAddr{Port: 80}, "second": &net.TCPAddr{Port: 80}}

// greetIdle dials the ConnListener at path as a sibling, exchanges hellos
// and returns the conversation, idle from then on.
func greetIdle(t *testing.T, path string) *conn {
	t.Helper()
	nc, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := newConn(nc, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, MaxVersion: Version, Role: roleSibling, PID: os.Getpid()}, nil); err != nil {
		t.Fatal(err)
	}
	if f, _, err := c.recv(0); err != nil || f.Type != typeHello {
		t.Fatalf("hello: %+v, %v", f, err)
	}
	return c
}

// maxSiblings conversations that say hello and go idle hold every slot of a
// ConnListener only for its Timeout: a sender dialling meanwhile is told
// "busy" (ErrBusy, code busy), each idle one is hung up on once it has
// waited a Timeout for its next batch, and a sender dialling then is
// answered. (They held the slots for an hour, and busy was sent with code
// "internal".)
func TestConnListenerIdleSlots(t *testing.T) {
	netnstest.CheckLeaks(t)
	const timeout = 3 * time.Second
	path := handoffPath(t)
	l, err := ListenConns(path, ConnsConfig{Timeout: timeout, Addrs: someAddrs}, map[string]func(PassedConn){"http": func(pc PassedConn) { pc.Conn.Close() }})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	start := time.Now()
	idle := make([]*conn, maxSiblings)
	for i := range idle {
		idle[i] = greetIdle(t, path)
	}
	ctx := context.Background()
	s, err := DialConns(ctx, path, ConnsConfig{})
	switch {
	case time.Since(start) >= timeout:
		t.Logf("the slots were taken over %v, longer than the Timeout: busy not checked", time.Since(start))
	case err == nil:
		s.Close()
		t.Error("a sender dialling while every slot is held was answered")
	case !errors.Is(err, ErrBusy):
		t.Errorf("a sender dialling while every slot is held: %v, want ErrBusy", err)
	}
	for i, c := range idle {
		// Bounded: the read's own deadline is 10 s past the Timeout, and
		// the listener hangs up at the Timeout.
		if f, _, err := c.recvWithin(0, timeout+20*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("idle conversation %d: %+v, %v; want hung up on after the Timeout", i, f, err)
		}
	}
	s, err = DialConns(ctx, path, ConnsConfig{})
	if err != nil {
		t.Fatalf("a sender dialling once the idle ones were hung up on: %v", err)
	}
	s.Close()
}

// A ConnListener's path is its own while it lives: ListenConns on a path a
// live ConnListener answers on fails with ErrPathInUse and leaves the live
// one answering (it renamed its socket over it: dials reached only the
// second, silently), while a stale socket file (its listener gone) is
// replaced.
func TestListenConnsPathInUse(t *testing.T) {
	netnstest.CheckLeaks(t)
	path := handoffPath(t)
	first, err := ListenConns(path, ConnsConfig{Addrs: someAddrs}, map[string]func(PassedConn){"first": func(pc PassedConn) { pc.Conn.Close() }})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if l, err := ListenConns(path, ConnsConfig{Addrs: someAddrs}, map[string]func(PassedConn){"second": func(pc PassedConn) { pc.Conn.Close() }}); !errors.Is(err, ErrPathInUse) {
		if err == nil {
			l.Close()
		}
		t.Errorf("ListenConns on a live ConnListener's path: %v, want ErrPathInUse", err)
	}
	s, err := DialConns(context.Background(), path, ConnsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Takes("first") || s.Takes("second") {
		t.Errorf("a dial after the refused ListenConns reached the wrong listener: Takes(first) %v, Takes(second) %v", s.Takes("first"), s.Takes("second"))
	}
	s.Close()
	// A stale socket file: bound, then closed without unlinking.
	stale := handoffPath(t)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err := ListenConns(stale, ConnsConfig{Addrs: someAddrs}, map[string]func(PassedConn){"http": func(pc PassedConn) { pc.Conn.Close() }})
	if err != nil {
		t.Fatalf("ListenConns over a stale socket file: %v", err)
	}
	l.Close()
}
