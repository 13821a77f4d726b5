package main

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeSystemd is the receiving end of a notify socket, as PID 1 has it.
type fakeSystemd struct {
	fd   int
	addr string
}

func listenNotify(t *testing.T, addr string) *fakeSystemd {
	t.Helper()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: addr}); err != nil {
		t.Fatal(err)
	}
	tv := unix.NsecToTimeval((20 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return &fakeSystemd{fd: fd, addr: addr}
}

// recv returns the next datagram (waiting at most 20 s) and its fds, which
// are closed when the test ends.
func (s *fakeSystemd) recv(t *testing.T) (string, []*os.File) {
	t.Helper()
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*8))
	n, oobn, flags, _, err := unix.Recvmsg(s.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatalf("fake systemd: recvmsg: %v", err)
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		t.Fatalf("fake systemd: truncated datagram")
	}
	cms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	var files []*os.File
	for _, cm := range cms {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			f := os.NewFile(uintptr(fd), "stored")
			t.Cleanup(func() { f.Close() })
			files = append(files, f)
		}
	}
	return string(buf[:n]), files
}

func (s *fakeSystemd) expect(t *testing.T, want string) {
	t.Helper()
	got, files := s.recv(t)
	if got != want || len(files) != 0 {
		t.Fatalf("datagram %q with %d fds, want %q and none", got, len(files), want)
	}
}
