package linux_test

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestUnreadUnsent: bytes a peer has not read wait in its receive queue
// (SIOCINQ); once its window is full, bytes written wait in the writer's send
// queue, unacknowledged (SIOCOUTQ). Both empty once the peer has read
// everything. A closed socket gives an error, not 0.
func TestUnreadUnsent(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		w, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		ws, rs := w.(syscall.Conn), r.(syscall.Conn)

		if n, err := linux.Unsent(ws); n != 0 || err != nil {
			t.Errorf("Unsent of a fresh connection: %d, %v; want 0", n, err)
		}
		// Write until the peer's window and our buffer are full.
		chunk := make([]byte, 64<<10)
		wrote := 0
		for i := 0; i < 1024; i++ {
			w.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			n, err := w.Write(chunk)
			wrote += n
			if err != nil {
				break
			}
		}
		unread, err := linux.Unread(rs)
		if err != nil || unread == 0 {
			t.Fatalf("Unread at the reader after %d bytes written: %d, %v; want > 0", wrote, unread, err)
		}
		unsent, err := linux.Unsent(ws)
		if err != nil || unsent == 0 {
			t.Fatalf("Unsent at the writer with the reader's window full: %d, %v; want > 0", unsent, err)
		}
		t.Logf("%d bytes written: %d unread at the reader, %d unsent or unacknowledged at the writer", wrote, unread, unsent)

		// The reader reads everything: both queues empty.
		r.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(r, make([]byte, wrote)); err != nil {
			t.Fatal(err)
		}
		for i := 0; ; i++ {
			unsent, err = linux.Unsent(ws)
			if err != nil || unsent == 0 || i == 200 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if unsent != 0 || err != nil {
			t.Errorf("Unsent once the reader read all: %d, %v; want 0", unsent, err)
		}
		if n, err := linux.Unread(rs); n != 0 || err != nil {
			t.Errorf("Unread once read: %d, %v; want 0", n, err)
		}
		w.Close()
		if n, err := linux.Unsent(ws); err == nil {
			t.Errorf("Unsent of a closed socket: %d, nil error", n)
		}
	})
}
