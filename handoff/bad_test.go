package handoff

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// rawFrame is a header and payload as given, valid or not.
func rawFrame(n uint32, body string) []byte {
	b := binary.BigEndian.AppendUint32(nil, n)
	return append(b, body...)
}

func helloJSON(version int) string {
	return `{"type":"hello","version":` + itoa(version) + `,"role":"successor","pid":` + itoa(os.Getpid()) + `}`
}

func itoa(i int) string { return strconv.Itoa(i) }

// Bad bytes from a would-be successor: each is refused with a typed error,
// answered with an error frame where the protocol allows, nothing leaks, and
// the predecessor keeps serving: a real successor takes over afterwards.
func TestBadBytesFromSuccessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		core, logs := observer.New(zap.InfoLevel)
		old := mustReady(t, Config{Path: path, Logger: zap.New(core), Timeout: 2 * time.Second}, 2)
		defer old.Close()
		for _, tc := range []struct {
			name  string
			send  []byte
			code  string // error frame expected back, "" for none
			match error
		}{
			{"wrong version", rawFrame(uint32(len(helloJSON(99))), helloJSON(99)), codeVersion, ErrVersion},
			{"truncated", rawFrame(100, `{"type":"hel`), "", ErrTruncated},
			{"oversized", rawFrame(0xffffffff, ""), codeProtocol, ErrFrameTooLarge},
			{"bad json", rawFrame(5, "{nope"), codeProtocol, ErrProtocol},
			{"unknown type", rawFrame(15, `{"type":"boom"}`), codeProtocol, ErrProtocol},
		} {
			t.Run(tc.name, func(t *testing.T) {
				logs.TakeAll()
				before := netnstest.FDCount(t)
				c, err := net.Dial("unix", path)
				if err != nil {
					t.Fatal(err)
				}
				c.Write(tc.send)
				c.(*net.UnixConn).CloseWrite()
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				back, _ := readAll(c)
				c.Close()
				if tc.code != "" {
					f, err := decode(back)
					if err != nil || f.Type != typeError || f.Code != tc.code {
						t.Fatalf("answer %q (%v), want an error frame %q", back, err, tc.code)
					}
				}
				err = loggedError(t, logs)
				if !errors.Is(err, tc.match) {
					t.Fatalf("logged %v, want %v", err, tc.match)
				}
				settleFDs(t, before)
			})
		}
		// A successor that takes the fds and acks the wrong count.
		t.Run("wrong ack", func(t *testing.T) {
			logs.TakeAll()
			before := netnstest.FDCount(t)
			c := fakeSuccessor(t, path)
			f, fds, err := c.recv(BatchFDs)
			if err != nil || f.Type != typeFDs || len(fds) != 2 {
				t.Fatalf("fds frame %+v, %d fds, %v", f, len(fds), err)
			}
			closeFDs(fds)
			c.send(&frame{Type: typeAck, Received: 1}, nil)
			f, _, err = c.recv(0)
			c.Close()
			if err != nil || f.Code != codeProtocol {
				t.Fatalf("answer %+v %v, want protocol error", f, err)
			}
			if err := loggedError(t, logs); !errors.Is(err, ErrProtocol) {
				t.Fatalf("logged %v", err)
			}
			settleFDs(t, before)
		})
		if st, ok, err := Observe(context.Background(), path); err != nil || !ok || st.Generation != 1 || st.Failures != 2 {
			t.Fatalf("Observe = %+v %v %v, want generation 1 with 2 failures (the successor of another version, the wrong ack)", st, ok, err)
		}
		next := mustReady(t, Config{Path: path}, 2)
		defer next.Close()
		select {
		case <-old.Exit():
		case <-time.After(10 * time.Second):
			t.Fatal("predecessor's Exit not closed")
		}
	})
}

// fakeSuccessor connects, says hello and reads hello and offer.
func fakeSuccessor(t *testing.T, path string) *conn {
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := newConn(nc.(*net.UnixConn), 5*time.Second)
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleSuccessor, PID: os.Getpid()}, nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{typeHello, typeOffer} {
		if f, _, err := c.recv(0); err != nil || f.Type != want {
			t.Fatalf("got %+v %v, want %s", f, err, want)
		}
	}
	return c
}

func readAll(c net.Conn) ([]byte, error) {
	var out []byte
	buf := make([]byte, 4096)
	for i := 0; i < 100; i++ {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// loggedError waits (bounded) for the server's failure log and returns its error.
func loggedError(t *testing.T, logs *observer.ObservedLogs) error {
	t.Helper()
	for i := 0; i < 500; i++ {
		for _, e := range logs.FilterMessage("handoff refused or failed; still serving").All() {
			for _, f := range e.Context {
				if err, ok := f.Interface.(error); ok && f.Key == "error" {
					return err
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no failure logged in 5 s")
	return nil
}

func settleFDs(t *testing.T, want int) {
	t.Helper()
	n := 0
	for i := 0; i < 500; i++ {
		if n = netnstest.FDCount(t); n == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d fds open, %d before", n, want)
}

// fakePredecessor serves path once: it reads the successor's hello and runs
// script with the connection; it returns what the successor answered last.
func fakePredecessor(t *testing.T, path string, script func(c *conn)) <-chan *frame {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *frame, 1)
	go func() {
		defer close(out)
		defer ln.Close()
		ln.SetDeadline(time.Now().Add(10 * time.Second))
		nc, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		c, _ := newConn(nc, 5*time.Second)
		defer c.Close()
		if f, _, err := c.recv(0); err != nil || f.Type != typeHello {
			return
		}
		script(c)
		out <- lastFrame(c)
	}()
	return out
}

// lastFrame reads frames until the peer hangs up (at most 10) and returns the
// last one, nil if none; fds that come with them are closed.
func lastFrame(c *conn) *frame {
	var last *frame
	for i := 0; i < 10; i++ {
		f, fds, err := c.recv(0)
		closeFDs(fds)
		if err != nil {
			break
		}
		last = f
	}
	return last
}

// Bad bytes from a would-be predecessor: New fails with a typed error, the
// predecessor is told why, and every fd received is closed.
func TestBadBytesFromPredecessor(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		// No GC: a listener we fail to close must stay open, not be closed
		// by its finalizer while settleFDs waits.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		ctx := context.Background()
		tcp, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer tcp.Close()
		udp, err := reuseport.ListenPacket(ctx, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer udp.Close()
		good := socketInfo{Name: "http", Kind: kindTCP, Network: "tcp4", Address: tcp.Addr().String(), Digest: tcp.Digest().String()}
		pipeR, pipeW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer pipeR.Close()
		defer pipeW.Close()
		tcpFD, udpFD := mustDup(t, tcp), mustDup(t, udp)
		defer closeFDs([]int{tcpFD, udpFD})
		hello := &frame{Type: typeHello, Version: baseVersion, Role: rolePredecessor, PID: os.Getpid(), Generation: 4}
		offer := func(c *conn, infos ...socketInfo) {
			c.send(hello, nil)
			c.send(&frame{Type: typeOffer, Sockets: infos}, nil)
		}
		other := good
		other.Name = "other"
		for _, tc := range []struct {
			name   string
			script func(c *conn)
			match  error
			code   string // answered to the predecessor
			check  string // ValidationError.Check
		}{
			{"wrong version", func(c *conn) { h := *hello; h.Version = Version + 1; c.send(&h, nil) }, ErrVersion, codeVersion, ""},
			{"oversized", func(c *conn) { c.c.Write(rawFrame(MaxFrame+1, "")) }, ErrFrameTooLarge, codeProtocol, ""},
			{"fd count below offer", func(c *conn) {
				offer(c, good, other)
				c.send(&frame{Type: typeFDs, First: 0, Count: 2}, []int{tcpFD})
			}, ErrFDCount, codeProtocol, ""},
			{"fds with the offer", func(c *conn) {
				c.send(hello, nil)
				c.send(&frame{Type: typeOffer, Sockets: []socketInfo{good}}, []int{tcpFD})
			}, ErrFDCount, codeProtocol, ""},
			{"pipe for a listener", func(c *conn) {
				offer(c, good)
				c.send(&frame{Type: typeFDs, Count: 1}, []int{int(pipeR.Fd())})
			}, ErrValidation, codeValidation, "S_IFSOCK"},
			{"udp socket for a listener", func(c *conn) {
				offer(c, good)
				c.send(&frame{Type: typeFDs, Count: 1}, []int{udpFD})
			}, ErrValidation, codeValidation, "SO_TYPE"},
			{"wrong address", func(c *conn) {
				bad := good
				bad.Address = "127.0.0.1:1"
				offer(c, bad)
				c.send(&frame{Type: typeFDs, Count: 1}, []int{tcpFD})
			}, ErrValidation, codeValidation, "getsockname"},
			{"wrong digest", func(c *conn) {
				bad := good
				bad.Digest = "sha256:0000000000000000"
				offer(c, bad)
				c.send(&frame{Type: typeFDs, Count: 1}, []int{tcpFD})
			}, ErrValidation, codeValidation, "digest"},
			{"pipe in the second batch", func(c *conn) {
				// 299 good sockets (the same fd, under other names) are
				// validated, and have listeners built, before the bad one
				// arrives: all of them must be closed.
				infos := make([]socketInfo, 300)
				fds := make([]int, 300)
				for i := range infos {
					infos[i], fds[i] = good, tcpFD
					infos[i].Name = "l" + strconv.Itoa(i)
				}
				infos[299].Name, fds[299] = "http", int(pipeR.Fd())
				offer(c, infos...)
				c.send(&frame{Type: typeFDs, Count: BatchFDs}, fds[:BatchFDs])
				c.recv(0) // the ack
				c.send(&frame{Type: typeFDs, First: BatchFDs, Count: 300 - BatchFDs}, fds[BatchFDs:])
			}, ErrValidation, codeValidation, "S_IFSOCK"},
			{"busy", func(c *conn) { c.send(&frame{Type: typeError, Code: codeInProgress, Message: "busy"}, nil) }, ErrHandoffInProgress, "", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				path := handoffPath(t)
				before := netnstest.FDCount(t)
				answer := fakePredecessor(t, path, tc.script)
				u, err := New(ctx, Config{Path: path, Timeout: 3 * time.Second})
				if err == nil {
					u.Close()
					t.Fatal("New succeeded")
				}
				if !errors.Is(err, tc.match) {
					t.Fatalf("New: %v, want %v", err, tc.match)
				}
				var ve *ValidationError
				if tc.check != "" && (!errors.As(err, &ve) || ve.Check != tc.check || ve.Name != "http") {
					t.Fatalf("New: %#v, want a ValidationError of %s", err, tc.check)
				}
				t.Logf("%v", err)
				f := <-answer
				if tc.code != "" && (f == nil || f.Type != typeError || f.Code != tc.code) {
					t.Fatalf("predecessor was told %+v, want error %s", f, tc.code)
				}
				settleFDs(t, before)
			})
		}
	})
}

func mustDup(t *testing.T, c syscall.Conn) int {
	t.Helper()
	fd, err := linux.DupConn(c)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}
