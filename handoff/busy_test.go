package handoff

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// unread is how many bytes written to c its peer has not read yet
// (SIOCOUTQ: a unix socket's sent bytes are charged to the sender until the
// receiver consumes or drops them).
func unread(t *testing.T, c *net.UnixConn) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil {
		t.Fatal(err)
	}
	if ierr != nil {
		t.Fatal(ierr)
	}
	return n
}

// Allowed peers that each announce a 1 MiB frame, send a little of it and
// stall hold no memory they did not send: the server grows a frame's buffer
// as its bytes arrive, holds at most maxConversations conversations (the one
// that waited longest for bytes gives way to a newcomer, told "busy") and at
// most poolBytes beyond each one's frameQuota. A real successor takes over
// while they stall.
func TestStalledAnnouncers(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		old := mustReady(t, Config{Path: path, Timeout: 2 * time.Minute}, 1)
		defer old.Close()
		const n = 2000
		// Most send 1,000 bytes of the frame, every tenth 64 KiB (beyond
		// its quota: from the pool).
		small := append(rawFrame(MaxFrame, ""), bytes.Repeat([]byte{' '}, 1000)...)
		big := append(rawFrame(MaxFrame, ""), bytes.Repeat([]byte{' '}, 64<<10)...)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		conns := announce(t, path, n, func(i int) []byte {
			if i%10 == 9 {
				return big
			}
			return small
		})
		// Wait (bounded) until the server has read or dropped every byte.
		deadline := time.Now().Add(60 * time.Second)
		for _, c := range conns {
			for unread(t, c) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the server left bytes unread for 60 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		growth := int64(m1.HeapInuse) - int64(m0.HeapInuse)
		t.Logf("heap in use grew by %.1f MiB with %d peers that announced %d bytes and sent 1,000 or 64 Ki", float64(growth)/(1<<20), n, MaxFrame)
		if growth > 64<<20 {
			t.Errorf("heap in use grew by %d bytes", growth)
		}
		checkBounds(t, old)
		// The first peer gave way to a newcomer and was told why.
		c, _ := newConn(conns[0], 10*time.Second)
		if f, _, err := c.recv(0); err != nil || f.Type != typeError || f.Code != codeBusy {
			t.Errorf("the first stalled peer got %+v %v, want an error frame %q", f, err, codeBusy)
		}
		handover(t, old, Config{Path: path}, func(u *Upgrader) {
			ln, err := u.Listen(context.Background(), "l0", "tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
		})
	})
}

// Frames bigger than the quota share one pool: of 40 peers that each send
// 64 KiB of a 1 MiB frame, those the pool cannot hold are told "busy", and
// the rest hold at most poolBytes between them.
func TestAnnouncersShareAPool(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		core, logs := observer.New(zap.WarnLevel)
		old := mustReady(t, Config{Path: path, Timeout: 2 * time.Minute, Logger: zap.New(core)}, 1)
		defer old.Close()
		const n = 40
		sent := append(rawFrame(MaxFrame, ""), bytes.Repeat([]byte{' '}, 64<<10)...)
		announce(t, path, n, func(int) []byte { return sent })
		// Each peer is held or refused: wait (bounded) until all are and the
		// pool has refused some (a peer is held as soon as it is accepted,
		// before its bytes are read; without the pool none is ever refused).
		busy := 0
		for i := 0; ; i++ {
			busy = 0
			for _, e := range logs.FilterField(zap.String("event", "handoff.failed")).All() {
				if err, ok := e.ContextMap()["error"].(string); ok && strings.Contains(err, ErrBusy.Error()) {
					busy++
				}
			}
			old.srv.mu.Lock()
			held := len(old.srv.conns)
			old.srv.mu.Unlock()
			if busy+held == n && busy > 0 {
				break
			}
			if i == 6000 {
				t.Fatalf("after 30 s, %d peers held and %d refused of %d", held, busy, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
		checkBounds(t, old)
		if busy == 0 {
			t.Errorf("%d peers with 64 KiB each all held", n)
		}
	})
}

// announce makes n connections to path and writes sent(i) on the i-th; they
// are closed when the test ends.
func announce(t *testing.T, path string, n int, sent func(i int) []byte) []*net.UnixConn {
	t.Helper()
	conns := make([]*net.UnixConn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		// The server may have refused it already (it said busy and closed).
		if _, err := c.Write(sent(i)); err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatal(err)
		}
	}
	return conns
}

// checkBounds checks the server's accounting: conversations and bytes held.
func checkBounds(t *testing.T, u *Upgrader) {
	t.Helper()
	s := u.srv
	s.mu.Lock()
	conv := len(s.conns)
	s.mu.Unlock()
	held := s.pool.held()
	t.Logf("%d conversations, %d bytes held beyond their quota", conv, held)
	if conv > maxConversations || held > poolBytes {
		t.Errorf("%d conversations (limit %d), %d bytes held (limit %d)", conv, maxConversations, held, poolBytes)
	}
}

// held is how many bytes the pool reserves now.
func (p *pool) held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used
}
