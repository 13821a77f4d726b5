package sockdiag

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const procRoot = "/proc"

// Owners scans /proc/*/fd for the given socket inodes ("socket:[N]" links). It
// returns, per inode, the processes holding it, and the PIDs whose fd directory
// could not be read (e.g. EACCES for another user's processes when not root), so
// callers can say so.
//
// Each process appears once per inode however many fds it holds, processes are
// sorted by PID, and unreadable is sorted. Inodes nobody holds have no key.
// Processes that exit during the scan are skipped. Only thread-group leaders are
// scanned, so a thread that unshared its fd table (CLONE_FILES not set) is not
// seen. Seeing every process needs root or CAP_SYS_PTRACE.
func Owners(inodes []uint64) (owners map[uint64][]Process, unreadable []int, err error) {
	want := make(map[uint64]bool, len(inodes))
	for _, ino := range inodes {
		want[ino] = true
	}
	owners = make(map[uint64][]Process)
	if len(want) == 0 {
		return owners, nil, nil
	}
	pids, err := listPIDs()
	if err != nil {
		return nil, nil, fmt.Errorf("sockdiag: owners: %w", err)
	}
	for _, pid := range pids {
		held, err := socketsOf(pid, want)
		if gone(err) {
			continue
		}
		if err != nil {
			unreadable = append(unreadable, pid)
			continue
		}
		if len(held) == 0 {
			continue
		}
		p, err := readProcess(pid)
		if gone(err) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("sockdiag: owners: %w", err)
		}
		for _, ino := range held {
			owners[ino] = append(owners[ino], p)
		}
	}
	return owners, unreadable, nil
}

// SelfPID returns the calling process's PID as /proc numbers it, the number
// Owners reports for it. That is not os.Getpid() in a process that has its own
// PID namespace but its parent's /proc mount (a harness or container runtime
// that unshares CLONE_NEWPID without remounting /proc): there os.Getpid()
// names no process, or another one. When /proc does not show the caller at
// all, the error wraps fs.ErrNotExist.
func SelfPID() (int, error) {
	link, err := os.Readlink(procRoot + "/self")
	if err != nil {
		return 0, fmt.Errorf("sockdiag: self pid: %w", err)
	}
	pid, err := strconv.Atoi(link)
	if err != nil {
		return 0, fmt.Errorf("sockdiag: self pid: %s/self links to %q", procRoot, link)
	}
	return pid, nil
}

// listPIDs returns the numeric entries of /proc in ascending order.
func listPIDs() ([]int, error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// socketsOf returns the wanted socket inodes among the fds of pid, each once, in
// fd order. A gone error means the process exited.
func socketsOf(pid int, want map[uint64]bool) ([]uint64, error) {
	dir := procRoot + "/" + strconv.Itoa(pid) + "/fd"
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	var held []uint64
	for _, name := range names {
		link, err := os.Readlink(dir + "/" + name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // this fd was closed meanwhile; a gone process fails the next readlink or ReadDir
		}
		if err != nil {
			return nil, err
		}
		ino, ok := socketInode(link)
		if ok && want[ino] && !slices.Contains(held, ino) {
			held = append(held, ino)
		}
	}
	return held, nil
}

// socketInode parses a "socket:[N]" fd link.
func socketInode(link string) (uint64, bool) {
	s, ok := strings.CutPrefix(link, "socket:[")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, "]"); !ok {
		return 0, false
	}
	ino, err := strconv.ParseUint(s, 10, 64)
	return ino, err == nil
}

// readProcess reads the command name and effective UID of pid.
func readProcess(pid int) (Process, error) {
	dir := procRoot + "/" + strconv.Itoa(pid)
	comm, err := os.ReadFile(dir + "/comm")
	if err != nil {
		return Process{}, err
	}
	p := Process{PID: pid, Comm: strings.TrimSuffix(string(comm), "\n")}
	f, err := os.Open(dir + "/status")
	if err != nil {
		return Process{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Uid:")
		if !ok {
			continue
		}
		// Uid: real effective saved filesystem
		fields := strings.Fields(rest)
		if len(fields) < 2 {
			break
		}
		uid, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			return Process{}, fmt.Errorf("%s/status: Uid: %w", dir, err)
		}
		p.UID = uint32(uid)
		return p, nil
	}
	if err := sc.Err(); err != nil {
		return Process{}, err
	}
	return Process{}, fmt.Errorf("%s/status: no Uid line", dir)
}

// gone reports whether err means that the process no longer exists.
func gone(err error) bool {
	return err != nil && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH))
}
