package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// tcpPair returns the server's end of a connection accepted on l (the
// client's end is closed when the test ends).
func tcpPair(t *testing.T, l net.Listener) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.(*net.TCPConn)
}

// A receiver hands no socket to two servers, and only its listeners'
// connections to their handlers: a batch that passes one connection twice,
// one that passes again a connection handed over before and still open,
// and one declaring for "http" a connection accepted on another listener
// are each refused with a validation error, and their handler sees none of
// them; a good batch between them is acked and handed. (The first two were
// acked and handed twice: two servers on one connection.)
func TestConnsHandedOnce(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		other, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		var handed atomic.Int32
		kept := make(chan PassedConn, 8)
		path := handoffPath(t)
		l, err := ListenConns(path, ConnsConfig{Addrs: map[string]net.Addr{"http": ln.Addr()}}, map[string]func(PassedConn){"http": func(pc PassedConn) {
			time.Sleep(50 * time.Millisecond) // a handler runs after the ack: one that is slow to start
			handed.Add(1)
			kept <- pc // held open: handed and still ours
		}})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			l.Close()
			close(kept)
			for pc := range kept {
				pc.Conn.Close()
			}
		}()
		a, b, elsewhere := tcpPair(t, ln), tcpPair(t, ln), tcpPair(t, other)
		first := 0
		// send passes conns as one batch on a new conversation and returns
		// the answer.
		send := func(conns ...*net.TCPConn) *frame {
			t.Helper()
			c := greetIdle(t, path)
			defer c.Close()
			f := &frame{Type: typeConns, First: first, Count: len(conns)}
			var fds []int
			for _, tc := range conns {
				fd := mustDup(t, tc)
				fds = append(fds, fd)
				d, err := declareConn(fd, "http", nil)
				if err != nil {
					t.Fatal(err)
				}
				f.Conns = append(f.Conns, d)
			}
			err := c.send(f, fds)
			closeFDs(fds)
			if err != nil {
				t.Fatal(err)
			}
			ans, _, err := c.recvWithin(0, 20*time.Second)
			if err != nil {
				t.Fatalf("answer: %v", err)
			}
			return ans
		}
		refused := func(what string, ans *frame, check string) {
			t.Helper()
			if ans.Type != typeError || ans.Code != codeValidation || !strings.Contains(ans.Message, check) {
				t.Errorf("%s: answered %+v, want a validation error naming %s", what, ans, check)
			}
		}
		refused("one connection twice in a batch", send(a, a), "inode")
		if ans := send(a); ans.Type != typeAck || ans.Received != 1 {
			t.Fatalf("a good batch: answered %+v, want an ack of 1", ans)
		}
		select { // the ack says the connection is taken; its handler runs after it
		case pc := <-kept:
			kept <- pc
		case <-time.After(10 * time.Second):
			t.Fatal("the good batch's handler did not run within 10 s of its ack")
		}
		refused("a connection handed before and still open", send(b, a), "inode")
		refused(fmt.Sprintf("a connection accepted on %s declared for http", other.Addr()), send(elsewhere), "listener address")
		if n := handed.Load(); n != 1 {
			t.Errorf("the handler got %d connections, want the 1 of the good batch", n)
		}
	})
}

// A successor that stops taking connections (StopTakingConns, as a
// generation does as its drain begins) acknowledges nothing more: the
// predecessor's next PassConns fails with ErrNotTaken and the connection is
// still its own, and the handler sees only what was acknowledged before.
// (A successor acked connections after its ServeConn had stopped taking
// them; they were then closed.)
func TestStopTakingConns(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		path := handoffPath(t)
		u1, _, clients, conns := predecessorWithConns(t, path, 2)
		u2, handed := takingSuccessor(t, path)
		<-u1.Exit()
		if n, err := u1.PassConns(context.Background(), conns[:1]); n != 1 || err != nil {
			t.Fatalf("PassConns before the stop: %d, %v", n, err)
		}
		u2.StopTakingConns()
		if n := handed.Load(); n != 1 {
			t.Errorf("StopTakingConns returned with %d connections handed, want the 1 acknowledged", n)
		}
		if n, err := u1.PassConns(context.Background(), conns[1:]); n != 0 || !errors.Is(err, ErrNotTaken) {
			t.Errorf("PassConns after the successor stopped taking: %d, %v; want 0, ErrNotTaken", n, err)
		}
		fmt.Fprintf(conns[1].Conn, "ours\n")
		if err := readLines(clients[1], "ours"); err != nil {
			t.Errorf("the connection not taken: %v", err)
		}
		if n := handed.Load(); n != 1 {
			t.Errorf("the handler got %d connections, want 1", n)
		}
	})
}

// takingSuccessor is a ready successor at path that takes the connections
// of "http" (its listener inherited), and the count of those handed to it.
func takingSuccessor(t *testing.T, path string) (*Upgrader, *atomic.Int32) {
	t.Helper()
	u, err := New(context.Background(), Config{Path: path, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	var handed atomic.Int32
	if err := u.HandleConns("http", func(pc PassedConn) { handed.Add(1); pc.Conn.Close() }); err != nil {
		t.Fatal(err)
	}
	ln, err := u.Listen(context.Background(), "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	return u, &handed
}

// A successor refuses a connection declared for its listener "http" but
// accepted on another listener (another port): the batch fails with a
// validation error, nothing is handed, and the connection is still the
// predecessor's. (It was served as one of "http"'s.)
func TestConnsOtherListener(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		path := handoffPath(t)
		u1, _, _, _ := predecessorWithConns(t, path, 0)
		other, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		client, err := net.Dial("tcp4", other.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		sc, err := other.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		_, handed := takingSuccessor(t, path)
		<-u1.Exit()
		n, err := u1.PassConns(context.Background(), []PassedConn{{Listener: "http", Conn: sc.(*net.TCPConn)}})
		if n != 0 || !errors.Is(err, ErrValidation) || !strings.Contains(err.Error(), "listener address") {
			t.Errorf("PassConns of another listener's connection as http's: %d, %v; want 0 and a validation error naming the listener address", n, err)
		}
		if n := handed.Load(); n != 0 {
			t.Errorf("the handler got %d connections", n)
		}
		fmt.Fprintf(sc, "ours\n")
		if err := readLines(client, "ours"); err != nil {
			t.Errorf("the connection refused: %v", err)
		}
	})
}

// A receiver that answers the hello and then never acknowledges (a sibling
// stopped after it answered) keeps PassConns no longer than its ctx: it
// fails with ErrNotTaken wrapping ctx's error, the connection is still the
// sender's, and the receiver's late ack cannot be sent (EPIPE), so nothing
// is held by both. (PassConns waited its whole Timeout, past the drain's
// budget.)
func TestPassConnsCtx(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		sc := tcpPair(t, ln)
		path := handoffPath(t)
		ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		lateAck := make(chan error, 1)
		go func() {
			nc, err := ul.AcceptUnix()
			if err != nil {
				lateAck <- err
				return
			}
			c, _ := newConn(nc, 20*time.Second)
			defer c.Close()
			c.recv(0)
			c.send(&frame{Type: typeHello, Version: 2, Role: roleSibling, PID: 1, Takes: []string{"http"}}, nil)
			_, fds, err := c.recv(BatchFDs)
			closeFDs(fds)
			if err != nil {
				lateAck <- err
				return
			}
			// Wedged until the sender gave up: its read side is shut.
			for range 2000 {
				if c.c.SetReadDeadline(time.Now().Add(10*time.Millisecond)) != nil {
					break
				}
				if _, err := c.c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
					break
				}
			}
			lateAck <- c.send(&frame{Type: typeAck, Received: 1}, nil)
		}()
		s, err := DialConns(context.Background(), path, ConnsConfig{Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		n, err := s.PassConns(ctx, []PassedConn{{Listener: "http", Conn: sc}})
		if n != 0 || !errors.Is(err, ErrNotTaken) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("PassConns to a receiver that never acks: %d, %v; want 0, ErrNotTaken and the ctx's deadline", n, err)
		}
		if err := <-lateAck; !errors.Is(err, syscall.EPIPE) {
			t.Errorf("the receiver's late ack: %v, want EPIPE", err)
		}
		if _, err := sc.Write([]byte("x")); err != nil {
			t.Errorf("the connection not passed: %v", err)
		}
	})
}
