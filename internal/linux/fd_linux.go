package linux

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Control runs f with the socket's fd, without duplicating it (File would, and
// would turn off deadlines). The fd is valid only during f.
func Control(c syscall.Conn, f func(fd int) error) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// Unread is how many bytes wait in the socket's receive queue, not yet read
// by its owner (SIOCINQ).
func Unread(c syscall.Conn) (int, error) { return ioctlInt(c, unix.SIOCINQ, "SIOCINQ") }

// Unsent is how many bytes the socket has sent, or has yet to send, that
// its peer has not acknowledged (SIOCOUTQ): 0 when the peer's TCP has every
// byte written.
func Unsent(c syscall.Conn) (int, error) { return ioctlInt(c, unix.SIOCOUTQ, "SIOCOUTQ") }

// ioctlInt reads the int the ioctl req (named name in errors) gives of c.
func ioctlInt(c syscall.Conn, req uint, name string) (int, error) {
	var n int
	err := Control(c, func(fd int) error {
		var err error
		if n, err = unix.IoctlGetInt(fd, req); err != nil {
			return os.NewSyscallError("ioctl "+name, err)
		}
		return nil
	})
	return n, err
}

// LinkUp sets IFF_UP on an interface of the calling thread's network namespace
// (lo starts down in a new namespace).
func LinkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl SIOCGIFFLAGS", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return os.NewSyscallError("ioctl SIOCSIFFLAGS", err)
	}
	return nil
}

// FileType names the file type bits of an st_mode ("regular file",
// "directory", "socket", ...), for errors that say what was found instead of
// what was expected.
func FileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFIFO:
		return "pipe"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	}
	return fmt.Sprintf("mode %#o", mode&unix.S_IFMT)
}

// DupConn returns a close-on-exec dup of c's fd; the caller owns it.
func DupConn(c syscall.Conn) (int, error) {
	fd := -1
	err := Control(c, func(f int) error {
		var err error
		fd, err = DupCloexec(f)
		return err
	})
	return fd, err
}
