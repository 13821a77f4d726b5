package sockdiag

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// FDs returns the fd numbers under which pid holds the socket inode, in
// /proc/PID/fd order. A process that exited gives an error wrapping
// fs.ErrNotExist.
func FDs(pid int, inode uint64) ([]int, error) {
	dir := procRoot + "/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("sockdiag: fds: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("sockdiag: fds: %w", err)
	}
	var fds []int
	for _, name := range names {
		link, err := os.Readlink(dir + "/" + name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // closed meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("sockdiag: fds: %w", err)
		}
		if ino, ok := socketInode(link); ok && ino == inode {
			if n, err := strconv.Atoi(name); err == nil {
				fds = append(fds, n)
			}
		}
	}
	return fds, nil
}

// LocalPID returns the PID, in the calling process's PID namespace, of the
// process /proc numbers procPID (as Owners reports it): the two differ when
// /proc belongs to an ancestor namespace. A process outside our namespace
// gives an error wrapping fs.ErrNotExist.
func LocalPID(procPID int) (int, error) {
	self, err := nsPIDList("self")
	if err != nil {
		return 0, err
	}
	their, err := nsPIDList(strconv.Itoa(procPID))
	if err != nil {
		return 0, err
	}
	if len(their) < len(self) {
		return 0, fmt.Errorf("sockdiag: pid %d is outside our PID namespace: %w", procPID, fs.ErrNotExist)
	}
	return their[len(self)-1], nil
}

// nsPIDList reads the NSpid line of /proc/<pid>/status: the process's PID in
// /proc's namespace first, its own namespace's last.
func nsPIDList(pid string) ([]int, error) {
	b, err := os.ReadFile(procRoot + "/" + pid + "/status")
	if err != nil {
		return nil, fmt.Errorf("sockdiag: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil, fmt.Errorf("sockdiag: %s/%s/status: NSpid %q", procRoot, pid, v)
				}
				out = append(out, n)
			}
			if len(out) > 0 {
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("sockdiag: %s/%s/status: no NSpid line", procRoot, pid)
}

// ErrNotHeld is wrapped by IncomingCPU's error when the process no longer
// holds the socket: it exited, or closed the fd, since /proc listed it as a
// holder. Another process may hold the socket now.
var ErrNotHeld = errors.New("no longer holds the socket")

// IncomingCPU reads SO_INCOMING_CPU of the socket inode through a copy of the
// fd pid (as /proc numbers it) holds it under (pidfd_getfd, Linux 5.6,
// allowed where ptrace is). inet_diag does not report the value. On error the
// CPU is -2; the error wraps ErrNotHeld when pid exited or let go of the
// socket meanwhile.
func IncomingCPU(pid int, inode uint64) (int, error) {
	fds, err := FDs(pid, inode)
	if errors.Is(err, fs.ErrNotExist) {
		return -2, fmt.Errorf("pid %d %w (inode %d): %w", pid, ErrNotHeld, inode, err)
	}
	if err != nil {
		return -2, err
	}
	if len(fds) == 0 {
		return -2, fmt.Errorf("pid %d %w (inode %d)", pid, ErrNotHeld, inode)
	}
	local, err := LocalPID(pid)
	if err != nil {
		return -2, err
	}
	pfd, err := unix.PidfdOpen(local, 0)
	if errors.Is(err, unix.ESRCH) {
		return -2, fmt.Errorf("pid %d %w (inode %d): %w", pid, ErrNotHeld, inode, os.NewSyscallError("pidfd_open", err))
	}
	if err != nil {
		return -2, os.NewSyscallError("pidfd_open", err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, fds[0], 0)
	if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EBADF) { // exited, or closed the fd
		return -2, fmt.Errorf("pid %d %w (inode %d): %w", pid, ErrNotHeld, inode, os.NewSyscallError("pidfd_getfd", err))
	}
	if err != nil {
		return -2, os.NewSyscallError("pidfd_getfd", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -2, os.NewSyscallError("fstat", err)
	}
	if st.Ino != inode { // the fd was closed and reused meanwhile
		return -2, fmt.Errorf("pid %d %w (inode %d): fd %d is another file now", pid, ErrNotHeld, inode, fds[0])
	}
	cpu, err := linux.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_INCOMING_CPU)
	if err != nil {
		return -2, os.NewSyscallError("getsockopt SO_INCOMING_CPU", err)
	}
	return cpu, nil
}
