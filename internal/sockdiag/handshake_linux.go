package sockdiag

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Handshakes dumps the handshakes in progress on local port (0: every port)
// in the calling thread's network namespace, IPv4 first. inet_diag does not
// say which listener of a reuseport group a request socket belongs to (its
// inode and UID read 0), so callers get the port's, a superset of any one
// member's. No capability is needed; Linux 4.4.
func Handshakes(port uint16) ([]Handshake, error) {
	fd, err := open()
	if err != nil {
		return nil, fmt.Errorf("sockdiag: handshakes: %w", err)
	}
	defer unix.Close(fd)
	var out []Handshake
	var seq uint32
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := dump(fd, family, port, handshakeStates, &seq)
		if err != nil {
			return nil, fmt.Errorf("sockdiag: handshakes %s: %w", familyName(family), err)
		}
		for _, l := range ls {
			out = append(out, Handshake{Addr: l.Addr, Cookie: l.Cookie})
		}
	}
	return out, nil
}

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
