package handoff

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// predecessorWithConns is a ready first generation serving "http" on path,
// and n connections accepted on it: the clients' ends, each of which has
// sent "a-<i>\n" that the server has not read, and the server's ends.
func predecessorWithConns(t *testing.T, path string, n int) (u *Upgrader, ln net.Listener, clients []net.Conn, conns []PassedConn) {
	t.Helper()
	ctx := context.Background()
	u, err := New(ctx, Config{Path: path, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	if ln, err = u.Listen(ctx, "http", "tcp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "a-%d\n", i); err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		clients = append(clients, c)
		conns = append(conns, PassedConn{Listener: "http", Conn: s.(*net.TCPConn), State: fmt.Appendf(nil, "s-%d\n", i)})
	}
	return u, ln, clients, conns
}

// readLines reads want lines from c (bounded), checking each.
func readLines(c net.Conn, want ...string) error {
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	for _, w := range want {
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Errorf("after %q: %w", line, err)
		}
		if line != w+"\n" {
			return fmt.Errorf("got %q, want %q", line, w)
		}
	}
	return nil
}

// 300 connections, accepted by the first generation, go to a successor
// process in two batches (253 + 47): each answers there with its state
// first, then the line its client had sent before the transfer (queued in
// the socket, never read by the predecessor), then one sent after: no byte
// lost, none twice, no new connection. The predecessor's ends are closed,
// and its fd count is back where it was.
func TestPassConnsToProcess(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		counters := netnstest.Snapshot(t)
		path := handoffPath(t)
		u, _, clients, conns := predecessorWithConns(t, path, 300)
		app := startApp(t, path, envConns+"=echo")
		defer app.Kill()
		app.expect(t, "ready")
		select {
		case <-u.Exit():
		case <-time.After(20 * time.Second):
			t.Fatal("no Exit")
		}
		if !u.TakesConns("http") || u.TakesConns("other") {
			t.Fatalf("TakesConns(http) %v, TakesConns(other) %v; want true, false", u.TakesConns("http"), u.TakesConns("other"))
		}
		passed, err := u.PassConns(context.Background(), conns)
		if err != nil || passed != len(conns) {
			t.Fatalf("PassConns: %d passed, %v; want %d", passed, err, len(conns))
		}
		for _, pc := range conns {
			if _, err := pc.Conn.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("the predecessor's end of a passed connection: write %v, want closed", err)
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, len(clients))
		for i, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if errs[i] = readLines(c, fmt.Sprintf("gen 2 http s-%d", i), fmt.Sprintf("gen 2 http a-%d", i)); errs[i] != nil {
					return
				}
				if _, errs[i] = fmt.Fprintf(c, "b-%d\n", i); errs[i] == nil {
					errs[i] = readLines(c, fmt.Sprintf("gen 2 http b-%d", i))
				}
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
		d := counters.Delta(t, "Tcp.OutRsts", "TcpExt.TCPAbortOnClose", "Tcp.ActiveOpens")
		if d["Tcp.OutRsts"] != 0 || d["TcpExt.TCPAbortOnClose"] != 0 || d["Tcp.ActiveOpens"] != int64(len(clients)) {
			t.Errorf("counters %v; want no reset, and %d active opens (no client connected again)", d, len(clients))
		}
		for _, c := range clients {
			c.Close()
		}
		u.Close()
	})
}

// A successor that dies after receiving a batch and before acking it took
// nothing: PassConns says ErrNotTaken with 0 passed, the connections are
// still the predecessor's and serve (the queued line is still there to be
// read), and TakesConns is false afterwards.
func TestPassConnsSuccessorDies(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		path := handoffPath(t)
		u, _, clients, conns := predecessorWithConns(t, path, 20)
		app := startApp(t, path, envConns+"=die")
		defer app.Kill()
		app.expect(t, "ready")
		<-u.Exit()
		passed, err := u.PassConns(context.Background(), conns)
		if !errors.Is(err, ErrNotTaken) || passed != 0 {
			t.Fatalf("PassConns to a dying successor: %d passed, %v; want 0 and ErrNotTaken", passed, err)
		}
		if u.TakesConns("http") {
			t.Error("TakesConns true after the successor died")
		}
		if err := app.Wait(context.Background()); err == nil {
			t.Error("the successor exited 0; want its hook's exit status 3")
		}
		for i, pc := range conns {
			pc.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			line, err := bufio.NewReader(pc.Conn).ReadString('\n')
			if err != nil || line != fmt.Sprintf("a-%d\n", i) {
				t.Fatalf("connection %d after the failed pass: read %q, %v", i, line, err)
			}
			fmt.Fprintf(pc.Conn, "still %d\n", i)
			if err := readLines(clients[i], fmt.Sprintf("still %d", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
	})
}

// Without a successor that takes them, nothing is passed and the caller
// keeps every connection; a listener the successor takes no connections of
// is refused before anything is sent; bad calls are typed errors.
func TestPassConnsNotTaken(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		path := handoffPath(t)
		u, _, clients, conns := predecessorWithConns(t, path, 3)
		ctx := context.Background()
		if n, err := u.PassConns(ctx, conns); !errors.Is(err, ErrNotTaken) || n != 0 {
			t.Fatalf("PassConns without a successor: %d, %v; want 0, ErrNotTaken", n, err)
		}
		if n, err := u.PassConns(ctx, nil); !errors.Is(err, ErrNotTaken) || n != 0 {
			t.Fatalf("PassConns(nil) without a successor: %d, %v; want 0, ErrNotTaken", n, err)
		}
		// A successor that takes "http" only.
		app := startApp(t, path, envConns+"=echo")
		defer app.Kill()
		app.expect(t, "ready")
		<-u.Exit()
		other := append([]PassedConn(nil), conns...)
		other[2].Listener = "other"
		if n, err := u.PassConns(ctx, other); !errors.Is(err, ErrNotTaken) || n != 0 || !strings.Contains(err.Error(), `"other"`) {
			t.Fatalf("PassConns of a listener not taken: %d, %v; want 0, ErrNotTaken naming it", n, err)
		}
		big := append([]PassedConn(nil), conns...)
		big[0].State = make([]byte, MaxConnState+1)
		if n, err := u.PassConns(ctx, big); err == nil || n != 0 {
			t.Fatalf("PassConns with too much state: %d, %v; want an error", n, err)
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if n, err := u.PassConns(cancelled, conns); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotTaken) || n != 0 {
			t.Fatalf("PassConns with an ended ctx: %d, %v", n, err)
		}
		// Every refusal left the connections to us: they still serve.
		for i, pc := range conns {
			fmt.Fprintf(pc.Conn, "ours %d\n", i)
			if err := readLines(clients[i], fmt.Sprintf("ours %d", i)); err != nil {
				t.Fatalf("client %d: %v", i, err)
			}
		}
	})
}

// HandleConns refuses a nil handler, and a call after Ready or Close.
func TestHandleConnsMisuse(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		u := mustReady(t, Config{Path: handoffPath(t)}, 1)
		if err := u.HandleConns("l0", func(PassedConn) {}); err == nil || !strings.Contains(err.Error(), "after Ready") {
			t.Errorf("HandleConns after Ready: %v", err)
		}
		u.Close()
		u2, err := New(context.Background(), Config{Path: handoffPath(t)})
		if err != nil {
			t.Fatal(err)
		}
		if err := u2.HandleConns("x", nil); err == nil {
			t.Error("HandleConns(nil) accepted")
		}
		u2.Close()
		if err := u2.HandleConns("x", func(PassedConn) {}); !errors.Is(err, ErrClosed) {
			t.Errorf("HandleConns after Close: %v, want ErrClosed", err)
		}
	})
}

// A predecessor of protocol version 1 (the release before connections)
// refuses the hello's "max_version" key as unknown; the successor says
// hello again without it, inherits, and its ready frame says nothing of
// connections; it keeps no conversation for them.
func TestOldPredecessorConns(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		l := listenTCP(t)
		path := handoffPath(t)
		old := serveOldRelease(t, path, l, "max_version", func(hello *frame) bool { return hello.MaxVersion != 0 })
		u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("New against a version 1 predecessor: %v", err)
		}
		if err := u.HandleConns("http", func(pc PassedConn) { pc.Conn.Close() }); err != nil {
			t.Fatal(err)
		}
		ln, err := u.Listen(ctx, "http", "tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Ready(); err != nil {
			t.Fatal(err)
		}
		<-old.done
		hellos, ready := old.hellos, old.ready
		if len(hellos) != 2 || hellos[0].MaxVersion != Version || hellos[1].MaxVersion != 0 || hellos[1].Version != 1 {
			t.Errorf("hellos %+v; want one with max_version %d, then one of version 1 without", hellos, Version)
		}
		if ready == nil || len(ready.Takes) != 0 {
			t.Errorf("ready frame to a version 1 predecessor: %+v, want one without takes", ready)
		}
		u.pass.mu.Lock()
		preds := len(u.pass.preds)
		u.pass.mu.Unlock()
		if preds != 0 {
			t.Errorf("%d conversations kept for connections with a version 1 predecessor", preds)
		}
		ln.Close()
		u.Close()
	})
}

// A successor of version 1 (no max_version) is answered in version 1; one
// of version 2 in version 2; one whose base version we do not speak is
// refused with ErrVersion.
func TestNegotiateVersion(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		path := handoffPath(t)
		u := mustReady(t, Config{Path: path}, 1)
		defer u.Close()
		for _, tc := range []struct {
			version, max, want int
		}{{1, 0, 1}, {1, 2, 2}, {1, 7, Version}, {2, 0, 2}, {Version + 1, 0, 0}} {
			nc, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			c, _ := newConn(nc.(*net.UnixConn), 5*time.Second)
			c.send(&frame{Type: typeHello, Version: tc.version, MaxVersion: tc.max, Role: roleObserver, PID: os.Getpid()}, nil)
			f, _, err := c.recv(0)
			c.Close()
			switch {
			case err != nil:
				t.Errorf("hello %d/%d: %v", tc.version, tc.max, err)
			case tc.want == 0 && (f.Type != typeError || f.Code != codeVersion):
				t.Errorf("hello %d/%d: answered %+v, want a version error", tc.version, tc.max, f)
			case tc.want != 0 && (f.Type != typeHello || f.Version != tc.want):
				t.Errorf("hello %d/%d: answered %+v, want version %d", tc.version, tc.max, f, tc.want)
			}
		}
	})
}

// A predecessor that passes a connection which is not what it declares (its
// peer address is another) has the whole batch refused: the successor
// answers a validation error instead of an ack, closes every fd of the
// batch (its fd count is back), and its handler sees none of them.
func TestConnsRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		l := listenTCP(t)
		var conns []*net.TCPConn
		for range 2 {
			client, err := net.Dial("tcp4", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			s, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			conns = append(conns, s.(*net.TCPConn))
		}
		path := handoffPath(t)
		before := netnstest.FDCount(t)
		answer := make(chan *frame, 1)
		done := servePredecessor(t, path, 1, func(c *conn, hello *frame) bool {
			if hello.MaxVersion != Version {
				t.Errorf("hello %+v without max_version %d", hello, Version)
			}
			offer := &frame{Type: typeOffer, OptionSets: map[string]map[string]string{l.Digest().String(): l.Digest().Map()},
				Sockets: []socketInfo{{Name: "http", Kind: kindTCP, Network: "tcp4", Address: l.Addr().String(), Digest: l.Digest().String()}}}
			fd := mustDup(t, l)
			defer closeFDs([]int{fd})
			h := &frame{Type: typeHello, Version: 2, Role: rolePredecessor, PID: os.Getpid(), Generation: 4}
			for _, f := range []*frame{h, offer} {
				c.send(f, nil)
			}
			c.send(&frame{Type: typeFDs, Count: 1}, []int{fd})
			if a, _, err := c.recv(0); err != nil || a.Type != typeAck {
				t.Errorf("ack: %+v %v", a, err)
				return false
			}
			r, _, err := c.recv(0)
			if err != nil || r.Type != typeReady || len(r.Takes) != 1 || r.Takes[0] != "http" {
				t.Errorf("ready: %+v %v; want one that takes http", r, err)
				return false
			}
			c.send(&frame{Type: typeDone, Generation: r.Generation}, nil)
			batch := &frame{Type: typeConns, Count: 2}
			var fds []int
			for i, tc := range conns {
				peer := tc.RemoteAddr().String()
				if i == 1 {
					peer = "127.0.0.1:1" // not its peer
				}
				batch.Conns = append(batch.Conns, connDecl{socketInfo: socketInfo{Name: "http", Kind: kindTCPConn, Network: "tcp4", Address: tc.LocalAddr().String()}, Peer: peer})
				fds = append(fds, mustDup(t, tc))
			}
			c.send(batch, fds)
			closeFDs(fds)
			f, _, err := c.recv(0)
			if err != nil {
				t.Errorf("answer to the bad batch: %v", err)
			}
			answer <- f
			return false
		})
		u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		handled := 0
		if err := u.HandleConns("http", func(pc PassedConn) { handled++; pc.Conn.Close() }); err != nil {
			t.Fatal(err)
		}
		ln, err := u.Listen(ctx, "http", "tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Ready(); err != nil {
			t.Fatal(err)
		}
		f := <-answer
		<-done
		if f == nil || f.Type != typeError || f.Code != codeValidation || !strings.Contains(f.Message, "getpeername") {
			t.Errorf("answer to a batch with a wrong peer: %+v, want a validation error naming getpeername", f)
		}
		ln.Close()
		u.Close()
		if handled != 0 {
			t.Errorf("the handler got %d connections of a refused batch", handled)
		}
		settleFDs(t, before)
	})
}

// A dual-stack listener (":0": an AF_INET6 socket) accepts IPv4 clients as
// AF_INET6 sockets with mapped addresses: they pass as tcp6, with the
// kernel's addresses, and one IPv6 client beside them. (Declared from Go's
// LocalAddr, "127.0.0.1", as tcp4, the successor refused them: family.)
func TestPassConnsDualStack(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		path := handoffPath(t)
		cfg := Config{Path: path, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}}
		u1, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer u1.Close()
		ln, err := u1.Listen(ctx, "http", "tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := u1.Ready(); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		var conns []PassedConn
		var clients []net.Conn
		for _, host := range []string{"127.0.0.1", "127.0.0.1", "::1"} {
			c, err := net.Dial("tcp", net.JoinHostPort(host, port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, c)
			conns = append(conns, PassedConn{Listener: "http", Conn: s.(*net.TCPConn)})
		}
		u2, err := New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer u2.Close()
		got := make(chan PassedConn, len(conns))
		if err := u2.HandleConns("http", func(pc PassedConn) { got <- pc }); err != nil {
			t.Fatal(err)
		}
		ln2, err := u2.Listen(ctx, "http", "tcp", ":"+port)
		if err != nil {
			t.Fatal(err)
		}
		defer ln2.Close()
		if err := u2.Ready(); err != nil {
			t.Fatal(err)
		}
		<-u1.Exit()
		if n, err := u1.PassConns(ctx, conns); n != len(conns) || err != nil {
			t.Fatalf("PassConns of a dual-stack listener's connections: %d, %v", n, err)
		}
		for i := range conns {
			pc := <-got
			fmt.Fprintf(pc.Conn, "hello %d\n", i)
			pc.Conn.Close()
		}
		for i, c := range clients {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "hello ") {
				t.Errorf("client %d: %q, %v", i, line, err)
			}
		}
	})
}
