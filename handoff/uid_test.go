package handoff

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

const nobody = 65534

// A peer with another uid is refused in both directions, with a *PeerError
// naming it, and the server keeps serving.
func TestOtherUIDRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		exe := netnstest.ExecutableCopy(t)
		cred := &syscall.Credential{Uid: nobody, Gid: nobody}
		t.Run("successor as nobody", func(t *testing.T) {
			path := fmt.Sprintf("@zerodrop-test-%d-a", os.Getpid())
			core, logs := observer.New(zap.InfoLevel)
			old := mustReady(t, Config{Path: path, Logger: zap.New(core)}, 1)
			defer old.Close()
			p := netnstest.StartHelper(t, "app", netnstest.HelperOptions{Path: exe, Credential: cred, Env: []string{envPath + "=" + path}})
			a := &appProc{Proc: p, lines: lines(p.Stdout)}
			f := a.expect(t, "error")
			if msg := strings.Join(f, " "); !strings.Contains(msg, "peer credentials refused: pid ") || !strings.Contains(msg, " uid 0 ") {
				t.Fatalf("successor said %q, want it to refuse uid 0", msg)
			}
			var pe *PeerError
			if err := loggedError(t, logs); !errors.As(err, &pe) || pe.UID != nobody || int(pe.PID) != p.Cmd.Process.Pid {
				t.Fatalf("predecessor logged %v, want a *PeerError for uid %d pid %d", err, nobody, p.Cmd.Process.Pid)
			}
			if st, ok, err := Observe(context.Background(), path); err != nil || !ok || st.Generation != 1 {
				t.Fatalf("Observe = %+v %v %v", st, ok, err)
			}
		})
		t.Run("predecessor as nobody", func(t *testing.T) {
			path := fmt.Sprintf("@zerodrop-test-%d-b", os.Getpid())
			p := netnstest.StartHelper(t, "app", netnstest.HelperOptions{Path: exe, Credential: cred, Env: []string{envPath + "=" + path}})
			a := &appProc{Proc: p, lines: lines(p.Stdout)}
			addr := a.expect(t, "ready")[3]
			before := netnstest.FDCount(t)
			_, err := New(context.Background(), Config{Path: path})
			var pe *PeerError
			if !errors.As(err, &pe) || !errors.Is(err, ErrPeerRefused) || pe.UID != nobody || int(pe.PID) != p.Cmd.Process.Pid {
				t.Fatalf("New: %v, want a *PeerError for uid %d", err, nobody)
			}
			t.Logf("%v", err)
			settleFDs(t, before)
			if g, err := request(addr); err != nil || g != 1 {
				t.Fatalf("request after the refusal: generation %d, %v", g, err)
			}
		})
	})
}

// The predecessor whose UID a successor checks is the process that talks to
// it, not the one that bound the handoff socket: SO_PEERCRED names that one
// (generation 1), and the socket is passed on to each generation. Here
// generation 1 (root, allowing nobody) binds it and hands over to
// generation 2, nobody (allowing root); a successor as root with the
// default AllowUIDs then refuses generation 2, naming its pid and uid, and
// generation 2 keeps serving, and Observe refuses it too. (It took over
// from nobody, and Observe answered: SO_PEERCRED said uid 0, generation
// 1's.)
func TestPredecessorUIDIsTheTalkers(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		exe := netnstest.ExecutableCopy(t)
		path := fmt.Sprintf("@zerodrop-test-%d-talker", os.Getpid())
		gen1 := mustReady(t, Config{Path: path, AllowUIDs: []uint32{nobody}}, 1)
		defer gen1.Close()
		p := netnstest.StartHelper(t, "app", netnstest.HelperOptions{Path: exe, Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
			Env: []string{envPath + "=" + path, envAllow + "=0"}})
		a := &appProc{Proc: p, lines: lines(p.Stdout)}
		f := a.expect(t, "ready")
		if f[1] != "2" {
			t.Fatalf("app: %v, want generation 2", f)
		}
		select {
		case <-gen1.Exit():
		case <-time.After(30 * time.Second):
			t.Fatal("generation 1 not told to exit 30 s after generation 2 was ready")
		}
		gen1.Close()
		before := netnstest.FDCount(t)
		if st, _, err := Observe(context.Background(), path); !errors.Is(err, ErrPeerRefused) {
			t.Errorf("Observe: %+v, %v; want ErrPeerRefused (generation 2 is nobody)", st, err)
		}
		u, err := New(context.Background(), Config{Path: path})
		var pe *PeerError
		if !errors.As(err, &pe) || !errors.Is(err, ErrPeerRefused) || pe.UID != nobody || int(pe.PID) != p.Cmd.Process.Pid {
			if err == nil {
				u.Close()
			}
			t.Fatalf("New: %v, want a *PeerError for generation 2, uid %d pid %d", err, nobody, p.Cmd.Process.Pid)
		}
		t.Logf("%v", err)
		settleFDs(t, before)
		if g, err := request(f[3]); err != nil || g != 2 {
			t.Fatalf("request after the refusal: generation %d, %v; want 2", g, err)
		}
	})
}

func lines(r *os.File) chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		buf := make([]byte, 0, 4096)
		tmp := make([]byte, 1024)
		for i := 0; i < 100000; i++ {
			n, err := r.Read(tmp)
			buf = append(buf, tmp[:n]...)
			for {
				j := strings.IndexByte(string(buf), '\n')
				if j < 0 {
					break
				}
				ch <- string(buf[:j])
				buf = buf[j+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

func TestAllowed(t *testing.T) {
	me := uint32(os.Geteuid())
	if err := checkPeer(&unix.Ucred{Uid: me}, nil); err != nil {
		t.Fatal(err)
	}
	err := checkPeer(&unix.Ucred{Pid: 9, Uid: me + 1}, nil)
	var pe *PeerError
	if !errors.As(err, &pe) || pe.UID != me+1 || pe.PID != 9 || len(pe.Allowed) != 1 {
		t.Fatalf("%v", err)
	}
	if err := checkPeer(&unix.Ucred{Uid: me + 1}, []uint32{me + 1}); err != nil {
		t.Fatal(err)
	}
}

// A predecessor that refuses a successor before reading its hello (its uid
// is not allowed) writes its refusal and closes; the successor's hello then
// fails with EPIPE, and the refusal waits in its receive queue. When the
// successor in turn refuses the writer of that refusal (here every uid),
// that is the answer: not a hang-up to dial again over (TestOtherUIDRefused
// failed 9 times in 100 so, "hung up 6 times": whether the hello went out
// before the close was a race between the two processes; here it is not).
func TestRefusedBeforeHello(t *testing.T) {
	c, peerSide := pairConn(t, 2*time.Second)
	rc, err := c.c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	if err := passCred("", "", rc); err != nil {
		t.Fatal(err)
	}
	c.talkers = func(cred *unix.Ucred) error {
		return &PeerError{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Allowed: []uint32{cred.Uid + 1}}
	}
	peer, err := newConn(peerSide, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	refusal := &PeerError{PID: 1, UID: 12345, Allowed: []uint32{0}}
	if err := peer.send(&frame{Type: typeError, Code: code(refusal), Message: refusal.Error()}, nil); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	err = c.send(helloFrame(roleSuccessor, 0, true, true), nil)
	if !predecessorGone(err) {
		t.Fatalf("hello after the peer's close: %v, want EPIPE", err)
	}
	var pe *PeerError
	if err := c.answeredFirst(err); !errors.As(err, &pe) || pe.UID != uint32(os.Geteuid()) || pe.PID != int32(os.Getpid()) {
		t.Fatalf("answeredFirst = %v, want our refusal of the writer, uid %d pid %d", err, os.Geteuid(), os.Getpid())
	}
}
