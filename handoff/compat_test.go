package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// servePredecessor serves path for conversations (bounded) with script,
// which gets each connection after the successor's hello and returns false
// once the conversation it waited for is over; the returned channel closes
// when it is done.
func servePredecessor(t *testing.T, path string, conversations int, script func(c *conn, hello *frame) bool) <-chan struct{} {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	// As a real predecessor's (listenHandoff), its Close never unlinks
	// path: the successor may have published its own file there by then.
	ln.SetUnlinkOnClose(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ln.Close()
		ln.SetDeadline(time.Now().Add(20 * time.Second))
		for range conversations {
			nc, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			c, _ := newConn(nc, 5*time.Second)
			f, _, err := c.recv(0)
			more := err == nil && f.Type == typeHello && script(c, f)
			if !more {
				lastFrame(c) // until the successor hangs up
			}
			c.Close()
			if !more {
				return
			}
		}
	}()
	return done
}

// offerOne sends a predecessor's hello, an offer of the listener l as
// "http" (declared by offer) and its fd, and reads the ack.
func offerOne(t *testing.T, c *conn, l *reuseport.Listener, offer *frame) error {
	fd := mustDup(t, l)
	defer closeFDs([]int{fd})
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, Role: rolePredecessor, PID: os.Getpid(), Generation: 4}, nil); err != nil {
		return err
	}
	if err := c.send(offer, nil); err != nil {
		return err
	}
	if err := c.send(&frame{Type: typeFDs, Count: 1}, []int{fd}); err != nil {
		return err
	}
	a, _, err := c.recv(0)
	if err == nil && (a.Type != typeAck || a.Received != 1) {
		err = errors.New("no ack: " + a.Type)
	}
	return err
}

// listenTCP is a reuseport TCP listener on 127.0.0.1, closed when the test
// ends.
func listenTCP(t *testing.T) *reuseport.Listener {
	t.Helper()
	l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// legacyOffer is the offer of an older release: l as its one socket
// "http", declared by its version 1 digest.
func legacyOffer(l *reuseport.Listener) *frame {
	return &frame{Type: typeOffer, Sockets: []socketInfo{{Name: "http", Kind: kindTCP, Network: "tcp4", Address: l.Addr().String(), Digest: l.Digest().LegacyString()}}}
}

// oldRelease is a fake predecessor of an older release, which does not know
// a key of the successor's hello.
type oldRelease struct {
	hellos []*frame        // the successor's hellos, in order
	ready  *frame          // its ready frame, if one came
	done   <-chan struct{} // closed once it is over; then hellos and ready may be read
}

// serveOldRelease serves path as an oldRelease (two conversations at
// most): it refuses a hello that has key (as has says) with what that
// release's strict version 1 decoder says, a protocol error (unknown key);
// to a hello without it, it offers l (legacyOffer) and answers the ready
// frame with done.
func serveOldRelease(t *testing.T, path string, l *reuseport.Listener, key string, has func(hello *frame) bool) *oldRelease {
	t.Helper()
	o := &oldRelease{}
	o.done = servePredecessor(t, path, 2, func(c *conn, hello *frame) bool {
		o.hellos = append(o.hellos, hello)
		if has(hello) {
			fe := &FrameError{Err: ErrProtocol, Detail: fmt.Sprintf("unknown key %q", key)}
			c.send(&frame{Type: typeError, Code: codeProtocol, Message: fe.Error()}, nil)
			return true
		}
		if err := offerOne(t, c, l, legacyOffer(l)); err != nil {
			t.Errorf("predecessor: %v", err)
			return false
		}
		if r, _, err := c.recv(0); err == nil && r.Type == typeReady {
			o.ready = r
			c.send(&frame{Type: typeDone, Generation: r.Generation}, nil)
		}
		return false
	})
	return o
}

// A predecessor of a newer release declares option values, among them one
// this release does not read, and our version of one it does not read
// missing: the successor compares the options both know and inherits. A
// declared value that differs from the socket's is a ValidationError.
func TestOfferWithOptionValues(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		l := listenTCP(t)
		for _, tc := range []struct {
			name  string
			edit  func(set map[string]string)
			check string // ValidationError.Check, "" for success
		}{
			{"newer table", func(set map[string]string) { set["SO_FROM_THE_FUTURE"] = "7"; delete(set, "TCP_USER_TIMEOUT") }, ""},
			{"different value", func(set map[string]string) { set["TCP_NODELAY"] = "1" }, "options"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := handoffPath(t)
				before := netnstest.FDCount(t)
				set := l.Digest().Map()
				tc.edit(set)
				offer := &frame{Type: typeOffer, OptionSets: map[string]map[string]string{"sha256:1234567890abcdef": set},
					Sockets: []socketInfo{{Name: "http", Kind: kindTCP, Network: "tcp4", Address: l.Addr().String(), Digest: "sha256:1234567890abcdef"}}}
				var asked bool
				done := servePredecessor(t, path, 1, func(c *conn, hello *frame) bool {
					asked = hello.Options
					if err := offerOne(t, c, l, offer); err != nil {
						t.Errorf("predecessor: %v", err)
					}
					return false
				})
				u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
				var ve *ValidationError
				switch {
				case tc.check == "" && err != nil:
					t.Fatalf("New: %v", err)
				case tc.check != "" && (!errors.As(err, &ve) || ve.Check != tc.check):
					if u != nil {
						u.Close()
					}
					t.Fatalf("New: %v, want a ValidationError of %s", err, tc.check)
				case tc.check == "":
					ln, err := u.Listen(ctx, "http", "tcp4", l.Addr().String())
					if err != nil {
						t.Fatal(err)
					}
					if rl, ok := ln.(*reuseport.Listener); !ok || rl.Digest().String() != l.Digest().String() {
						t.Errorf("inherited %T, want a *reuseport.Listener with the predecessor's digest", ln)
					}
					ln.Close()
					u.Close()
				}
				<-done
				if !asked {
					t.Error(`the successor's hello did not ask for option values ("options":true)`)
				}
				settleFDs(t, before)
			})
		}
	})
}

// A predecessor of the release before option values went on the wire
// refuses the hello's "options" key as an unknown key (code protocol, not
// counted as a failed handoff); the successor says hello again without it
// and inherits the socket declared by its version 1 digest.
func TestOldPredecessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		l := listenTCP(t)
		path := handoffPath(t)
		before := netnstest.FDCount(t)
		old := serveOldRelease(t, path, l, "options", func(hello *frame) bool { return hello.Options })
		u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatalf("New against an older predecessor: %v", err)
		}
		if g := u.Generation(); g != 5 {
			t.Errorf("Generation %d, want 5", g)
		}
		ln, err := u.Listen(ctx, "http", "tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		u.Close()
		<-old.done
		if len(old.hellos) != 2 {
			t.Errorf("%d hellos, want 2 (with values, then without)", len(old.hellos))
		}
		settleFDs(t, before)
	})
}

// A successor of the release before option values (its hello has no
// "options") gets the version 1 offer it can check: no option sets, and
// each digest the hash over the first release's option table.
func TestOldSuccessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		path := handoffPath(t)
		u := mustReady(t, Config{Path: path}, 1)
		defer u.Close()
		want := u.Table().Offer()[0].Read().Digest
		c := fakeSuccessorOffer(t, path, false)
		c.Close()
		if c.offer.OptionSets != nil || c.offer.Sockets[0].Digest != want.LegacyString() {
			t.Fatalf("offer to an old successor: %+v, want digest %s and no option sets", c.offer, want.LegacyString())
		}
		if want.LegacyString() != want.String() {
			t.Errorf("LegacyString %s != String %s: the table grew, and old successors compare the legacy hash", want.LegacyString(), want.String())
		}
		n := fakeSuccessorOffer(t, path, true)
		n.Close()
		s := n.offer.Sockets[0]
		if set := n.offer.OptionSets[s.Digest]; set == nil || want.CompareDeclared(set) != nil || len(set) != len(want.Values) {
			t.Fatalf("offer to a new successor: %+v, want the option values of %s", n.offer, s.Digest)
		}
	})
}

type offered struct {
	*conn
	offer *frame
}

// fakeSuccessorOffer connects, says hello (asking for values or not) and
// reads hello and offer; while the predecessor is still busy with the last
// fake successor (it frees its slot once it sees the hang-up), it tries
// again, at most 250 times.
func fakeSuccessorOffer(t *testing.T, path string, values bool) offered {
	t.Helper()
	for range 250 {
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := newConn(nc.(*net.UnixConn), 5*time.Second)
		if err := c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleSuccessor, PID: os.Getpid(), Options: values}, nil); err != nil {
			c.Close()
			t.Fatal(err)
		}
		var offer *frame
		for _, want := range []string{typeHello, typeOffer} {
			f, _, err := c.recv(0)
			if err == nil && f.Type == typeError && f.Code == codeInProgress {
				break
			}
			if err != nil || f.Type != want {
				c.Close()
				t.Fatalf("got %+v %v, want %s", f, err, want)
			}
			offer = f
		}
		if offer != nil && offer.Type == typeOffer {
			return offered{c, offer}
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the predecessor stayed busy for 5 s")
	return offered{}
}
