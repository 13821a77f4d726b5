package netnstest

import (
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NotifySocket is the receiving end of an sd_notify socket, as systemd (PID 1)
// has it: tests play systemd with it.
type NotifySocket struct {
	Addr  string // the NOTIFY_SOCKET value: a path or "@abstract"
	fd    int
	close sync.Once
}

// ListenNotify binds a unixgram socket at addr (a path or "@abstract"),
// closed when the test ends.
func ListenNotify(tb testing.TB, addr string) *NotifySocket {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	s := &NotifySocket{Addr: addr, fd: fd}
	tb.Cleanup(s.Close)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: addr}); err != nil {
		tb.Fatal(err)
	}
	tv := unix.NsecToTimeval(notifyTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		tb.Fatal(err)
	}
	return s
}

// Close closes the socket (once): a notification sent to an abstract
// address is then refused, as when systemd is gone.
func (s *NotifySocket) Close() { s.close.Do(func() { unix.Close(s.fd) }) }

// notifyTimeout bounds a Recv.
const notifyTimeout = 20 * time.Second

// Recv returns the next datagram and the fds that came with it (closed when
// the test ends), waiting at most 20 s.
func (s *NotifySocket) Recv(tb testing.TB) (string, []*os.File) {
	tb.Helper()
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*8))
	n, oobn, flags, err := s.recvmsg(buf, oob)
	if err != nil {
		tb.Fatalf("fake systemd: recvmsg: %v", err)
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		tb.Fatalf("fake systemd: truncated datagram (flags %#x)", flags)
	}
	var files []*os.File
	if oobn > 0 {
		cms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			tb.Fatal(err)
		}
		for _, cm := range cms {
			fds, err := unix.ParseUnixRights(&cm)
			if err != nil {
				tb.Fatal(err)
			}
			for _, fd := range fds {
				f := os.NewFile(uintptr(fd), "stored")
				tb.Cleanup(func() { f.Close() })
				files = append(files, f)
			}
		}
	}
	return string(buf[:n]), files
}

// Expect receives one datagram and fails unless it is want, without fds.
func (s *NotifySocket) Expect(tb testing.TB, want string) {
	tb.Helper()
	got, files := s.Recv(tb)
	if got != want || len(files) != 0 {
		tb.Fatalf("datagram %q with %d fds, want %q and none", got, len(files), want)
	}
}

// recvmsg receives one datagram, at most notifyTimeout. A socket with
// SO_RCVTIMEO is never restarted after a signal handler (signal(7)), even
// with SA_RESTART: the Go runtime's preemption signal (SIGURG) makes a
// blocked recvmsg fail with EINTR, which is retried until the deadline.
func (s *NotifySocket) recvmsg(buf, oob []byte) (n, oobn, flags int, err error) {
	deadline := time.Now().Add(notifyTimeout)
	for {
		n, oobn, flags, _, err = unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR || time.Now().After(deadline) {
			return n, oobn, flags, err
		}
	}
}
