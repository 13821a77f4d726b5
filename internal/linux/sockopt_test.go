package linux_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// GetsockoptInt must read what unix.GetsockoptInt reads, and fail the same
// way on a descriptor that is not a socket.
func TestGetsockoptInt(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, testGetsockoptInt)
}

func testGetsockoptInt(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct{ level, opt int }{
		{unix.SOL_SOCKET, unix.SO_REUSEPORT}, {unix.SOL_SOCKET, unix.SO_TYPE},
		{unix.SOL_SOCKET, unix.SO_RCVBUF}, {unix.IPPROTO_TCP, unix.TCP_NODELAY},
	} {
		got, err := linux.GetsockoptInt(fd, o.level, o.opt)
		want, werr := unix.GetsockoptInt(fd, o.level, o.opt)
		if err != nil || werr != nil || got != want {
			t.Errorf("option %d/%d: got %d, %v; unix.GetsockoptInt says %d, %v", o.level, o.opt, got, err, want, werr)
		}
	}
	if v, _ := linux.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT); v != 1 {
		t.Errorf("SO_REUSEPORT = %d after setting 1", v)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := linux.GetsockoptInt(p[0], unix.SOL_SOCKET, unix.SO_TYPE); !errors.Is(err, unix.ENOTSOCK) {
		t.Errorf("on a pipe: %v, want ENOTSOCK", err)
	}
}

// The raw calls must report what the x/sys/unix ones report.
func TestRawCallsAgree(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, testRawCallsAgree)
}

func testRawCallsAgree(t *testing.T) {
	l4 := listen(t, unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	l6 := listen(t, unix.AF_INET6, &unix.SockaddrInet6{Addr: [16]byte{15: 1}})
	lu := listen(t, unix.AF_UNIX, &unix.SockaddrUnix{Name: t.TempDir() + "/s"})
	la := listen(t, unix.AF_UNIX, &unix.SockaddrUnix{Name: "@zerodrop-raw-test"})
	for _, c := range []struct {
		fd   int
		want func(unix.Sockaddr) string
	}{
		{l4, func(sa unix.Sockaddr) string {
			a := sa.(*unix.SockaddrInet4)
			return "127.0.0.1:" + itoa(a.Port)
		}},
		{l6, func(sa unix.Sockaddr) string { return "[::1]:" + itoa(sa.(*unix.SockaddrInet6).Port) }},
		{lu, func(sa unix.Sockaddr) string { return sa.(*unix.SockaddrUnix).Name }},
		{la, func(unix.Sockaddr) string { return "@zerodrop-raw-test" }},
	} {
		sa, err := unix.Getsockname(c.fd)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := linux.Sockname(c.fd); err != nil || got != c.want(sa) {
			t.Errorf("Sockname = %q, %v; want %q", got, err, c.want(sa))
		}
	}
	cc, err := linux.GetsockoptString(l4, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	want, werr := unix.GetsockoptString(l4, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	if err != nil || werr != nil || cc != want || cc == "" {
		t.Errorf("TCP_CONGESTION = %q, %v; unix says %q, %v", cc, err, want, werr)
	}
	info, err := linux.TCPInfo(l4)
	winfo, werr := unix.GetsockoptTCPInfo(l4, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || werr != nil || info.State != winfo.State || info.Sacked != 7 || info.State != unix.BPF_TCP_LISTEN {
		t.Errorf("TCP_INFO state %d backlog %d, %v; unix says state %d backlog %d", info.State, info.Sacked, err, winfo.State, winfo.Sacked)
	}
	d, err := linux.DupCloexec(l4)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	if fl, err := unix.FcntlInt(uintptr(d), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		t.Errorf("dup flags %#x, %v: no FD_CLOEXEC", fl, err)
	}
	if got, _ := linux.Sockname(d); got == "" {
		t.Error("the dup is not the same socket")
	}
	if _, err := linux.DupCloexec(-1); !errors.Is(err, unix.EBADF) {
		t.Errorf("linux.DupCloexec(-1) = %v, want EBADF", err)
	}
	if _, err := linux.Sockname(-1); !errors.Is(err, unix.EBADF) {
		t.Errorf("linux.Sockname(-1) = %v, want EBADF", err)
	}
}

// listen returns a listening socket (backlog 7) bound to sa, closed at the
// end of the test.
func listen(t *testing.T, family int, sa unix.Sockaddr) int {
	t.Helper()
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 7); err != nil {
		t.Fatal(err)
	}
	return fd
}

func itoa(n int) string { return strconv.Itoa(n) }
