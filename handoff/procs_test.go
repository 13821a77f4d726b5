package handoff

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// Environment of the "rawpeer" helper (and envPath, the handoff socket).
const (
	envRawRole = "ZD_RAW_ROLE" // "successor" (default) or "predecessor"
	envRaw     = "ZD_RAW"      // the script: see rawSuccessor and rawPredecessor
)

// rawpeerMain is a process that speaks the handoff protocol wrongly on
// purpose, one scripted conversation per run. It reports on stdout:
//
//	listening                      (predecessor: serving the handoff path)
//	got error <code> | got eof     (successor: what the predecessor answered; then it exits 0)
//	told error <code> | told none  (predecessor: what the successor answered; then it waits to be killed)
//	error <message>                (the script could not run; exit 1)
func rawpeerMain() {
	path, script := os.Getenv(envPath), os.Getenv(envRaw)
	var err error
	if os.Getenv(envRawRole) == rolePredecessor {
		err = rawPredecessor(path, script)
	} else {
		err = rawSuccessor(path, script)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rawpeer pid %d: %v\n", os.Getpid(), err)
		fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

// rawSuccessor connects to path and sends one bad input: "version" (a hello
// of version 99), "truncated" (a header announcing 100 bytes, 12 of them, then
// end of stream), "oversized" (a header announcing MaxFrame+1), "role" (a
// hello with role "boss"), "json" (a payload that is not JSON), or "ack" (a
// real successor's start, but the fds are acked with the wrong count).
func rawSuccessor(path, script string) error {
	nc, err := net.DialTimeout("unix", path, 10*time.Second)
	if err != nil {
		return err
	}
	c, err := newConn(nc.(*net.UnixConn), 10*time.Second)
	if err != nil {
		nc.Close()
		return err
	}
	defer c.Close()
	hello := func(version int, role string) []byte {
		b, _ := encodeFrame(&frame{Type: typeHello, Version: version, Role: role, PID: os.Getpid()})
		return b
	}
	var send []byte
	switch script {
	case "version":
		send = hello(99, roleSuccessor)
	case "truncated":
		send = rawFrame(100, `{"type":"hel`)
	case "oversized":
		send = binary.BigEndian.AppendUint32(nil, MaxFrame+1)
	case "role":
		send = hello(baseVersion, "boss")
	case "json":
		send = rawFrame(5, "{nope")
	case "ack":
		return wrongAck(c)
	case "tickets":
		got, err := askTickets(c)
		if err == nil {
			fmt.Println(got)
		}
		return err
	default:
		return fmt.Errorf("unknown script %q", script)
	}
	if _, err := c.c.Write(send); err != nil {
		return err
	}
	if err := c.c.CloseWrite(); err != nil {
		return err
	}
	return report(c)
}

// wrongAck takes the predecessor's fds like a successor, closes them, and
// acks one more than it received.
func wrongAck(c *conn) error {
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleSuccessor, PID: os.Getpid()}, nil); err != nil {
		return err
	}
	var offer *frame
	for _, want := range []string{typeHello, typeOffer} {
		f, _, err := c.recv(0)
		if err == nil {
			err = expect(f, want)
		}
		if err != nil {
			return err
		}
		offer = f
	}
	f, fds, err := c.recv(BatchFDs)
	closeFDs(fds)
	if err == nil {
		err = expect(f, typeFDs)
	}
	if err != nil {
		return err
	}
	if len(fds) != len(offer.Sockets) {
		return fmt.Errorf("%d fds for an offer of %d", len(fds), len(offer.Sockets))
	}
	if err := c.send(&frame{Type: typeAck, Received: len(fds) + 1}, nil); err != nil {
		return err
	}
	return report(c)
}

// report prints the predecessor's answer: an error frame's code, or eof.
func report(c *conn) error {
	f, _, err := c.recv(0)
	switch {
	case errors.Is(err, io.EOF):
		fmt.Println("got eof")
	case err != nil:
		return fmt.Errorf("reading the answer: %w", err)
	case f.Type == typeError:
		fmt.Printf("got error %s\n", f.Code)
	default:
		fmt.Printf("got %s\n", f.Type)
	}
	return nil
}

// rawPredecessor serves path for one successor with a bad conversation, using
// sockets and a pipe it creates itself: "version" (a hello of version 2),
// "oversized" (a header announcing MaxFrame+1), "fdcount" (two sockets
// offered, one fd sent), "pipe" (a pipe for the listener "http"), "udp" (a
// UDP socket for it), "digest" (the right socket with a wrong digest), "mute"
// (it never accepts, and waits at most 2 minutes to be killed). It
// prints what the successor answered, then waits (at most 2 minutes) to be
// killed, so that the test counts its own fds while nothing else changes.
func rawPredecessor(path, script string) error {
	ctx := context.Background()
	tcp, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer tcp.Close()
	udp, err := reuseport.ListenPacket(ctx, "udp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer udp.Close()
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		return os.NewSyscallError("pipe2", err)
	}
	defer closeFDs(pipe[:])
	tcpFD, err := linux.DupConn(tcp)
	if err != nil {
		return err
	}
	defer closeFDs([]int{tcpFD})
	udpFD, err := linux.DupConn(udp)
	if err != nil {
		return err
	}
	defer closeFDs([]int{udpFD})
	good := socketInfo{Name: "http", Kind: kindTCP, Network: "tcp4", Address: tcp.Addr().String(), Digest: tcp.Digest().String()}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return err
	}
	defer ln.Close()
	fmt.Println("listening")
	if script == "mute" { // a wedged serve loop: connects queue, none is accepted
		time.Sleep(2 * time.Minute)
		return nil
	}
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	nc, err := ln.AcceptUnix()
	if err != nil {
		return err
	}
	c, err := newConn(nc, 10*time.Second)
	if err != nil {
		nc.Close()
		return err
	}
	defer c.Close()
	if f, _, err := c.recv(0); err != nil || f.Type != typeHello || f.Role != roleSuccessor {
		return fmt.Errorf("successor's hello: %+v %v", f, err)
	}
	hello := &frame{Type: typeHello, Version: baseVersion, Role: rolePredecessor, PID: os.Getpid(), Generation: 4}
	offer := func(fds []int, infos ...socketInfo) error {
		if err := c.send(hello, nil); err != nil {
			return err
		}
		if err := c.send(&frame{Type: typeOffer, Sockets: infos}, nil); err != nil {
			return err
		}
		return c.send(&frame{Type: typeFDs, Count: len(infos)}, fds)
	}
	other, bad := good, good
	other.Name = "other"
	bad.Digest = "sha256:0000000000000000"
	switch script {
	case "version":
		h := *hello
		h.Version = Version + 1
		err = c.send(&h, nil)
	case "oversized":
		_, err = c.c.Write(binary.BigEndian.AppendUint32(nil, MaxFrame+1))
	case "fdcount":
		err = offer([]int{tcpFD}, good, other)
	case "pipe":
		err = offer([]int{pipe[0]}, good)
	case "udp":
		err = offer([]int{udpFD}, good)
	case "digest":
		err = offer([]int{tcpFD}, bad)
	default:
		err = fmt.Errorf("unknown script %q", script)
	}
	if err != nil {
		return err
	}
	last := lastFrame(c) // what the successor sent last, before it hung up
	switch {
	case last == nil:
		fmt.Println("told none")
	case last.Type == typeError:
		fmt.Printf("told error %s\n", last.Code)
	default:
		fmt.Printf("told %s\n", last.Type)
	}
	time.Sleep(2 * time.Minute)
	return nil
}

// startRawPeer starts the "rawpeer" helper with script as role.
func startRawPeer(t *testing.T, path, role, script string) *appProc {
	t.Helper()
	p := netnstest.StartHelper(t, "rawpeer", netnstest.HelperOptions{Env: []string{envPath + "=" + path, envRawRole + "=" + role, envRaw + "=" + script}})
	return &appProc{Proc: p, lines: lines(p.Stdout)}
}

// waitExit waits (bounded) for p to exit and returns its exit code.
func waitExit(t *testing.T, p *netnstest.Proc) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := p.Wait(ctx)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("pid %d: %v", p.Cmd.Process.Pid, err)
	return -1
}

// Two successor processes at once, against a predecessor process serving
// under load: while the first is mid-transfer (the predecessor holds it after
// its batch of fds), the second is told ErrHandoffInProgress and exits
// non-zero; then the first takes over, the predecessor exits without a
// leaked fd, and no request fails.
func TestTwoSuccessorProcesses(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		gateR, gate, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := startAppIn(t, path, gateR, envMode+"=gate")
		gateR.Close()
		defer gate.Close()
		addr := old.expect(t, "ready")[3]
		ld := startLoad(t, addr, 4)
		ld.waitAnswers(t, 50)

		first := startApp(t, path)
		old.expect(t, "paused") // the first successor has the fds; its ack waits
		second := startApp(t, path)
		f := second.expect(t, "error")
		msg := strings.Join(f[1:], " ")
		if !strings.Contains(msg, ErrHandoffInProgress.Error()) || !strings.Contains(msg, "("+codeInProgress+")") {
			t.Fatalf("second successor: %q, want the in_progress error frame: %v", msg, ErrHandoffInProgress)
		}
		if code := waitExit(t, second.Proc); code == 0 {
			t.Fatal("second successor exited 0")
		}
		t.Logf("second successor: %s", msg)
		ld.waitAnswers(t, 50) // still served while the first successor waits

		if _, err := gate.WriteString("go\n"); err != nil {
			t.Fatal(err)
		}
		tookOver(t, first, old, ld, addr)
		first.Kill()
	})
}

// Bad bytes from would-be successor processes, against a predecessor process
// serving under load: each is answered as the protocol says (an error frame
// with its code, or a hang-up), the predecessor keeps answering requests with
// generation 1, counts as failed handoffs the successors it refused (another
// protocol version) or that failed during the transfer (the wrong ack), not
// bytes that never made a hello, leaks no fd, and hands over to a real
// successor afterwards; no request fails.
func TestBadBytesFromSuccessorProcess(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		path := handoffPath(t)
		old := startApp(t, path)
		addr := old.expect(t, "ready")[3]
		ld := startLoad(t, addr, 4)
		ld.waitAnswers(t, 50)
		var failures uint64
		for _, tc := range []struct {
			script string
			got    string // what the predecessor answered
			last   string // Status.LastError contains it if counted
		}{
			{"version", "error " + codeVersion, "version 99"},
			{"truncated", "eof", ""},
			{"oversized", "error " + codeProtocol, ""},
			{"role", "error " + codeProtocol, ""},
			{"json", "error " + codeProtocol, ""},
			{"ack", "error " + codeProtocol, "ack"},
		} {
			t.Run(tc.script, func(t *testing.T) {
				peer := startRawPeer(t, path, roleSuccessor, tc.script)
				if got := strings.Join(peer.expect(t, "got")[1:], " "); got != tc.got {
					t.Fatalf("predecessor answered %q, want %q", got, tc.got)
				}
				if code := waitExit(t, peer.Proc); code != 0 {
					t.Fatalf("rawpeer exited %d", code)
				}
				if g, err := request(addr); err != nil || g != 1 {
					t.Fatalf("request after the bad bytes: generation %d, %v", g, err)
				}
				if tc.last != "" {
					failures++
				}
				st, ok, err := Observe(ctx, path)
				if err != nil || !ok || st.Generation != 1 || st.Failures != failures {
					t.Fatalf("Observe = %+v %v %v, want generation 1 with %d failures", st, ok, err, failures)
				}
				if tc.last != "" && !strings.Contains(st.LastError, tc.last) {
					t.Fatalf("last error %q, want it to name %q", st.LastError, tc.last)
				}
				ld.waitAnswers(t, 20)
			})
		}
		next := startApp(t, path)
		tookOver(t, next, old, ld, addr)
		next.Kill()
	})
}

// Bad bytes from a would-be predecessor process, with fds it created itself:
// New in this process fails with the typed error, the predecessor is told the
// matching code, and this process's fd count comes back to what it was.
func TestBadBytesFromPredecessorProcess(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		// No GC: a socket we fail to close must stay open, not be closed by
		// its finalizer while settleFDs waits.
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		ctx := context.Background()
		for _, tc := range []struct {
			script string
			match  error
			code   string // told to the predecessor
			check  string // ValidationError.Check
		}{
			{"version", ErrVersion, codeVersion, ""},
			{"oversized", ErrFrameTooLarge, codeProtocol, ""},
			{"fdcount", ErrFDCount, codeProtocol, ""},
			{"pipe", ErrValidation, codeValidation, "S_IFSOCK"},
			{"udp", ErrValidation, codeValidation, "SO_TYPE"},
			{"digest", ErrValidation, codeValidation, "digest"},
		} {
			t.Run(tc.script, func(t *testing.T) {
				path := handoffPath(t)
				pred := startRawPeer(t, path, rolePredecessor, tc.script)
				defer pred.Kill()
				pred.expect(t, "listening")
				before := netnstest.FDCount(t)
				u, err := New(ctx, Config{Path: path, Timeout: 5 * time.Second})
				if err == nil {
					u.Close()
					t.Fatal("New succeeded")
				}
				if !errors.Is(err, tc.match) {
					t.Fatalf("New: %v, want %v", err, tc.match)
				}
				var oe *net.OpError
				if !errors.As(err, &oe) || oe.Op != "handoff" {
					t.Fatalf("New: %#v, want *net.OpError handoff", err)
				}
				var ve *ValidationError
				if tc.check != "" && (!errors.As(err, &ve) || ve.Check != tc.check || ve.Name != "http") {
					t.Fatalf("New: %#v, want a ValidationError of %s", err, tc.check)
				}
				t.Logf("%v", err)
				if f := pred.expect(t, "told"); strings.Join(f[1:], " ") != "error "+tc.code {
					t.Fatalf("predecessor was told %v, want error %s", f[1:], tc.code)
				}
				settleFDs(t, before)
			})
		}
	})
}

// tookOver checks that generation 2 (next) serves addr, that generation 1
// (old) exited 0 with the fds it started with, and that the load, ended here,
// had no failed request and heard from generation 2.
func tookOver(t *testing.T, next, old *appProc, ld *load, addr string) {
	t.Helper()
	if f := next.expect(t, "ready"); f[1] != "2" || f[3] != addr {
		t.Fatalf("successor reports %v", f)
	}
	if f := old.expect(t, "exit"); f[1] != f[2] {
		t.Fatalf("old exits with %s fds, started with %s", f[1], f[2])
	}
	if code := waitExit(t, old.Proc); code != 0 {
		t.Fatalf("old exited %d", code)
	}
	ld.waitAnswers(t, 50)
	ld.end()
	ok, errs, maxGen := ld.snapshot()
	t.Logf("%d requests answered, %d failed, last generation %d", ok, len(errs), maxGen)
	if len(errs) != 0 {
		t.Fatalf("%d failed requests, first: %v", len(errs), errs[0])
	}
	if maxGen != 2 {
		t.Fatalf("highest generation answering: %d, want 2", maxGen)
	}
}
