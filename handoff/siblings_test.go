package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// receiverMain serves ZD_HANDOFF_PATH as a ConnListener taking the
// connections of "http" accepted on ZD_ADDR (each answered by echoConn,
// generation 7), prints "listening", and closes once its stdin closes,
// printing "exit".
func receiverMain() {
	var wg sync.WaitGroup
	addr, err := net.ResolveTCPAddr("tcp", os.Getenv(envAddr))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	l, err := ListenConns(os.Getenv(envPath), ConnsConfig{Addrs: map[string]net.Addr{"http": addr}}, map[string]func(PassedConn){"http": func(pc PassedConn) {
		wg.Add(1)
		go func() { defer wg.Done(); echoConn(pc, 7) }()
	}})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	io.Copy(io.Discard, os.Stdin)
	l.Close()
	wg.Wait()
	fmt.Println("exit")
}

// A worker passes 300 connections to a sibling process serving a
// ConnListener: each is answered there, its state first, then the line its
// client had queued, then a new one; no client connects again, nothing is
// reset, and the sender's fds are back where they were.
func TestSiblings(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		counters := netnstest.Snapshot(t)
		path := handoffPath(t)
		u, ln, clients, conns := predecessorWithConns(t, path, 300)
		u.Close() // no successor here: the connections go to a sibling
		in, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		sib := path + ".conns"
		p := startHelper(t, "receiver", sib, in, envAddr+"="+ln.Addr().String())
		in.Close()
		defer func() { w.Close(); p.Kill() }()
		p.expect(t, "listening")
		ctx := context.Background()
		s, err := DialConns(ctx, sib, ConnsConfig{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Takes("http") || s.Takes("other") {
			t.Fatalf("Takes(http) %v, Takes(other) %v", s.Takes("http"), s.Takes("other"))
		}
		if n, err := s.PassConns(ctx, conns); n != len(conns) || err != nil {
			t.Fatalf("PassConns: %d, %v", n, err)
		}
		for i, c := range clients {
			if err := readLines(c, fmt.Sprintf("gen 7 http s-%d", i), fmt.Sprintf("gen 7 http a-%d", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
			fmt.Fprintf(c, "b-%d\n", i)
			if err := readLines(c, fmt.Sprintf("gen 7 http b-%d", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
		for _, c := range clients {
			c.Close()
		}
		s.Close()
		w.Close()
		p.expect(t, "exit")
		d := counters.Delta(t, "Tcp.OutRsts", "Tcp.ActiveOpens")
		if d["Tcp.OutRsts"] != 0 || d["Tcp.ActiveOpens"] != int64(len(clients)) {
			t.Errorf("counters %v; want no reset and %d active opens", d, len(clients))
		}
		if _, err := os.Stat(sib); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the receiver's socket file after Close: %v, want it removed", err)
		}
	})
}

// What a sibling channel refuses, each with a typed error and nothing
// passed: a listener it does not take, a receiver path in a directory
// others can write, a path nobody serves, a sender speaking version 1, bad
// ListenConns calls (no handler, a nil one, one without an address).
func TestSiblingsRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		path := handoffPath(t)
		u, ln, clients, conns := predecessorWithConns(t, path, 2)
		u.Close()
		sib := path + ".conns"
		addrs := map[string]net.Addr{"http": ln.Addr(), "other": ln.Addr()}
		l, err := ListenConns(sib, ConnsConfig{Addrs: addrs}, map[string]func(PassedConn){"other": func(pc PassedConn) { pc.Conn.Close() }})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		s, err := DialConns(ctx, sib, ConnsConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := s.PassConns(ctx, conns); n != 0 || !errors.Is(err, ErrNotTaken) {
			t.Errorf("PassConns of a listener not taken: %d, %v", n, err)
		}
		s.Close()
		if _, err := DialConns(ctx, path+".nobody", ConnsConfig{}); !errors.Is(err, ErrNotTaken) {
			t.Errorf("DialConns to a path nobody serves: %v, want ErrNotTaken", err)
		}
		open := t.TempDir()
		os.Chmod(open, 0o777)
		if _, err := ListenConns(open+"/c.sock", ConnsConfig{Addrs: addrs}, map[string]func(PassedConn){"http": func(PassedConn) {}}); !errors.Is(err, ErrInsecurePath) {
			t.Errorf("ListenConns in a world-writable directory: %v, want ErrInsecurePath", err)
		}
		if _, err := DialConns(ctx, open+"/c.sock", ConnsConfig{}); !errors.Is(err, ErrInsecurePath) {
			t.Errorf("DialConns in a world-writable directory: %v, want ErrInsecurePath", err)
		}
		for _, h := range []map[string]func(PassedConn){nil, {"http": nil}, {"noaddr": func(PassedConn) {}}} {
			if _, err := ListenConns(path+".bad", ConnsConfig{Addrs: addrs}, h); err == nil {
				t.Errorf("ListenConns(%v) accepted", h)
			}
		}
		// A sender of version 1 (no max_version) is refused: version.
		nc, err := net.Dial("unix", sib)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := newConn(nc.(*net.UnixConn), 5*time.Second)
		c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleSibling, PID: os.Getpid()}, nil)
		if f, _, err := c.recv(0); err != nil || f.Type != typeError || f.Code != codeVersion {
			t.Errorf("a version 1 sibling: answered %+v, %v; want a version error", f, err)
		}
		c.Close()
		// Every refusal left the connections to us.
		for i, pc := range conns {
			fmt.Fprintf(pc.Conn, "ours %d\n", i)
			if err := readLines(clients[i], fmt.Sprintf("ours %d", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
	})
}
