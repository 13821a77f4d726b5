package systemd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// checkSocket refuses a notify socket address that systemd never sets:
// empty, or neither an absolute path nor "@abstract" (a relative path would
// be resolved against the working directory).
func checkSocket(socket string) error {
	if socket == "" || (socket[0] != '/' && socket[0] != '@') {
		return fmt.Errorf("notify socket %q: want an absolute path or @abstract", socket)
	}
	return nil
}

// send sends msg in one datagram to the notify socket, with fd attached as
// SCM_RIGHTS when fd >= 0. The socket is opened per message, like sd_notify.
//
// Our own code beside go-systemd's daemon.SdNotify, for two reasons: SdNotify
// cannot attach an fd, so FDSTORE=1 (Store) cannot use it
// (coreos/go-systemd#442), and it talks only to $NOTIFY_SOCKET, not to a
// Notifier's Socket set by hand.
func send(socket, msg string, fd int) error {
	if err := checkSocket(socket); err != nil {
		return err
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
