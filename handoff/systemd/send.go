package systemd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// send sends msg in one datagram to the notify socket, with fd attached as
// SCM_RIGHTS when fd >= 0. The socket is opened per message, like sd_notify.
func send(socket, msg string, fd int) error {
	if socket == "" || (socket[0] != '/' && socket[0] != '@') {
		return fmt.Errorf("notify socket %q: want an absolute path or @abstract", socket)
	}
	s, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(s)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	to := &unix.SockaddrUnix{Name: socket}
	if err := unix.Sendmsg(s, []byte(msg), oob, to, unix.MSG_NOSIGNAL); err != nil {
		return os.NewSyscallError("sendmsg", err)
	}
	return nil
}

// monotonicUsec reads CLOCK_MONOTONIC in microseconds, as MONOTONIC_USEC wants.
func monotonicUsec() (int64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, os.NewSyscallError("clock_gettime", err)
	}
	return ts.Nano() / 1000, nil
}
