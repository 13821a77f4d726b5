package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"golang.org/x/sys/unix"
)

// abstract reports whether path names the abstract namespace ("@name").
func abstract(path string) bool { return len(path) > 0 && path[0] == '@' }

// pathError wraps err once in the *net.OpError of op on the unix socket
// path.
func pathError(op, path string, err error) error {
	return neterr.Op(op, "unix", &net.UnixAddr{Name: path, Net: "unix"}, err)
}

// maxSunPath is the longest path a unix socket address holds: sun_path is
// 108 bytes, and a file path needs its terminating NUL (an abstract name,
// whose leading NUL stands for "@", does not).
const maxSunPath = 107

// checkPath refuses a handoff socket path that cannot work, in New rather
// than in Ready: empty, too long for sun_path (for a file path, the
// temporary name Ready binds first too), or naming something that is not a
// socket (a regular file, a directory, a symlink: Ready would replace it, and
// connecting to it proves nothing about a predecessor). Its errors are not
// wrapped in a *net.OpError: each caller wraps them once, in its own op.
func checkPath(path string) error {
	bad := func(why string) error { return &PathError{Path: path, Why: why} }
	switch {
	case path == "":
		return bad("empty")
	case path == "@":
		return bad("an abstract name needs at least one character after @")
	case abstract(path):
		if len(path) > maxSunPath+1 {
			return bad(fmt.Sprintf("%d bytes; an abstract name holds at most %d after @", len(path)-1, maxSunPath))
		}
		return nil
	}
	if tmp := tempName(path); len(tmp) > maxSunPath {
		return bad(fmt.Sprintf("its temporary name %s is %d bytes; a unix socket path holds at most %d", tmp, len(tmp), maxSunPath))
	}
	var st unix.Stat_t
	switch err := unix.Lstat(path, &st); {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return os.NewSyscallError("lstat", err)
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return bad("exists and is a " + linux.FileType(st.Mode) + ", not a socket")
	}
	return nil
}

// checkDir refuses a file path (a handoff socket's, a PID file's) that
// others could replace: its directory must be a directory owned by us or
// root and writable by nobody else, and no ancestor up to / may be writable
// by group or others, except with the sticky bit (like /tmp: nobody else may
// rename or remove what we own in it). Both the
// path as written and the path its symlinks resolve to are checked. Abstract
// names have no file; SO_PEERCRED guards them.
func checkDir(path string) error {
	if abstract(path) {
		return nil
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return pathError("check", path, err)
	}
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		dirs = append(dirs, real)
	}
	for _, d := range dirs {
		for cur, parent := d, true; ; cur, parent = filepath.Dir(cur), false {
			if err := checkOneDir(path, cur, parent); err != nil {
				return err
			}
			if cur == "/" || cur == "." {
				break
			}
		}
	}
	return nil
}

// checkOneDir checks one directory of path's chain; parent is the directory
// that holds path itself, which must not be writable by others even with the
// sticky bit (they could create a name before we do).
func checkOneDir(path, dir string, parent bool) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return pathError("check", path, os.NewSyscallError("stat "+dir, err))
	}
	e := &InsecurePathError{Path: path, Dir: dir, Mode: os.FileMode(st.Mode & 0o7777), UID: st.Uid}
	sticky := st.Mode&unix.S_ISVTX != 0
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		e.Why = "is not a directory"
	case parent && st.Mode&0o022 != 0:
		e.Why = "is writable by group or others; use a directory of mode 0700 or 0755"
	case !parent && st.Mode&0o022 != 0 && !sticky:
		e.Why = "is an ancestor writable by group or others without the sticky bit: they can replace the directories below it"
	case parent && st.Uid != uint32(os.Geteuid()) && st.Uid != 0:
		// Only the parent's owner is checked: in a user namespace the
		// owner of / or /tmp shows as the overflow uid.
		e.Why = "belongs to another user"
	default:
		return nil
	}
	return e
}

// dial connects to the predecessor. ok is false when nobody serves path: no
// file, or a stale file left by a dead process (ECONNREFUSED). A full backlog
// (EAGAIN: connect on a unix socket does not wait for room, and a connect
// flood fills it) is retried with backoff, 1 ms doubling to 100 ms, until ctx
// ends; the error then matches both EAGAIN and ctx.Err(), also when ctx ends
// as a retry begins or during its connect (that connect then fails with
// ctx's error alone: on a loaded machine the backoff's timer and ctx can both
// be ready when dial runs, and the connect's deadline, ctx's, can pass before
// ctx's own timer fires).
//
// The socket has SO_PASSCRED before it connects: every byte read from it
// comes with its writer's credentials (see conn.talkers), also the bytes
// the peer writes as it accepts.
func dial(ctx context.Context, path string) (c *net.UnixConn, ok bool, err error) {
	d := net.Dialer{Control: passCred}
	var full error // the last EAGAIN
	for delay := time.Millisecond; ; delay = min(2*delay, 100*time.Millisecond) {
		nc, err := d.DialContext(ctx, "unix", path)
		switch {
		case err == nil:
			return nc.(*net.UnixConn), true, nil
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return nil, false, nil
		case errors.Is(err, syscall.EAGAIN):
			full = err
		case full != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
			// ctx ended as we dialled again. The dial's own timer, of
			// ctx's deadline, can fire before ctx's: Err may be nil yet.
			cause := ctx.Err()
			if cause == nil {
				cause = context.DeadlineExceeded
			}
			return nil, false, retriedUntil(full, cause)
		default:
			return nil, false, err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, retriedUntil(err, ctx.Err())
		case <-t.C:
		}
		if testHookRedial != nil {
			testHookRedial()
		}
	}
}

// testHookRedial, if set by a test, runs in dial before each retry.
var testHookRedial func()

// retriedUntil is err, a connect that kept failing, wrapped with cause, why
// the retries stopped; a *net.OpError keeps its op and address.
func retriedUntil(err, cause error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		e := *oe
		e.Err = fmt.Errorf("%w, retried until: %w", oe.Err, cause)
		return &e
	}
	return err
}

// checkPeer checks a peer's credentials against our euid and the allow-list.
func checkPeer(cred *unix.Ucred, allow []uint32) error {
	list := append([]uint32{uint32(os.Geteuid())}, allow...)
	if slices.Contains(list, cred.Uid) {
		return nil
	}
	return &PeerError{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Allowed: list}
}

// tempName is the private name Ready binds before it renames it to path.
func tempName(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid())+".tmp")
}

// listenHandoff creates the listening socket for our successor. For a file
// path it binds a private temporary name, chmods it 0600 and returns the name
// to publish later with rename(2) (atomic: a successor never finds no file).
func listenHandoff(path string) (*net.UnixListener, string, error) {
	name := path
	if !abstract(path) {
		name = tempName(path)
		os.Remove(name) // a leftover of a dead process with our pid
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, "", err
	}
	l.SetUnlinkOnClose(false)
	if !abstract(path) {
		if err := os.Chmod(name, 0o600); err != nil {
			l.Close()
			os.Remove(name)
			return nil, "", err
		}
	}
	return l, name, nil
}

// checkHandoffName checks the name an inherited handoff socket is declared
// bound to: Path itself for an abstract name, else a name in Path's
// directory (the temporary name the first generation bound, renamed to Path).
func checkHandoffName(path string, s *socketInfo) error {
	ok := s.Address == path
	if !abstract(path) {
		ok = !abstract(s.Address) && filepath.Dir(s.Address) == filepath.Dir(path)
	}
	if !ok {
		return &ValidationError{Name: s.Name, Check: "getsockname", Want: path, Got: s.Address}
	}
	return nil
}

// adoptPath checks the file at path of an inherited handoff socket, as
// listenHandoff made it (a socket file of mode 0600 owned by an allowed
// user), and returns its inode, to unlink only our own later.
func adoptPath(path string, allow []uint32) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, os.NewSyscallError("lstat", err)
	}
	bad := func(check, want, got string) error {
		return &ValidationError{Name: "handoff", Check: check, Want: want, Got: got + " at " + path}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFSOCK:
		return 0, bad("S_IFSOCK", "socket file", "file mode "+strconv.FormatUint(uint64(st.Mode&unix.S_IFMT), 8))
	case st.Mode&0o7777 != 0o600:
		return 0, bad("mode", "0600", strconv.FormatUint(uint64(st.Mode&0o7777), 8))
	case !slices.Contains(append([]uint32{uint32(os.Geteuid())}, allow...), st.Uid):
		return 0, bad("owner", "an allowed uid", strconv.FormatUint(uint64(st.Uid), 10))
	}
	return st.Ino, nil
}

// listenAbstract binds an abstract name the predecessor is releasing: it closes
// its listener before it sends done, so a few retries are enough.
func listenAbstract(ctx context.Context, path string, timeout time.Duration) (*net.UnixListener, error) {
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) || i > 1000 {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// publish renames the temporary socket file over path.
func publish(tmp, path string) (ino uint64, err error) {
	if err := os.Rename(tmp, path); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, os.NewSyscallError("lstat", err)
	}
	return st.Ino, nil
}

// publishNew links the temporary socket file to path unless a live socket
// answers there (ErrPathInUse): link(2), unlike rename, never replaces, so
// of two processes publishing at once one fails; a stale file (its socket
// closed: connect refused) is removed first. Then it removes tmp. timeout
// bounds the connect (a live socket's full backlog is retried).
func publishNew(tmp, path string, timeout time.Duration) (ino uint64, err error) {
	for range 3 {
		err = os.Link(tmp, path)
		if !errors.Is(err, os.ErrExist) {
			break
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			continue // gone meanwhile
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		nc, ok, derr := dial(ctx, path)
		cancel()
		if ok {
			nc.Close()
			return 0, fmt.Errorf("%w: %s", ErrPathInUse, path)
		}
		if derr != nil {
			return 0, fmt.Errorf("check the socket at %s: %w", path, derr)
		}
		unpublish(path, st.Ino) // stale
	}
	if err != nil {
		return 0, err
	}
	os.Remove(tmp)
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0, os.NewSyscallError("lstat", err)
	}
	return st.Ino, nil
}

// unpublish removes path if it is still the file we published.
func unpublish(path string, ino uint64) {
	var st unix.Stat_t
	if ino != 0 && unix.Lstat(path, &st) == nil && st.Ino == ino {
		os.Remove(path)
	}
}

// preparePIDFile writes our pid to the PID file's temporary name, which it
// creates with O_EXCL|O_NOFOLLOW: it never writes through a link someone
// planted there (a *PathError), and it removes only a regular file of ours
// left there by a dead process with our pid. commitPIDFile renames it over
// path.
func preparePIDFile(path string) (tmp string, err error) {
	tmp = path + "." + strconv.Itoa(os.Getpid()) + ".tmp"
	var st unix.Stat_t
	if unix.Lstat(tmp, &st) == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Uid != uint32(os.Geteuid()) {
			return "", &PathError{Path: tmp, Why: "the PID file's temporary name exists and is a " + linux.FileType(st.Mode) + " we did not leave: not following or replacing it"}
		}
		os.Remove(tmp)
	}
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ELOOP) {
			return "", &PathError{Path: tmp, Why: "the PID file's temporary name was created by someone else meanwhile"}
		}
		return "", fmt.Errorf("write pid file: %w", os.NewSyscallError("open "+tmp, err))
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write pid file: %w", err)
	}
	return tmp, nil
}

// commitPIDFile renames the temporary PID file over path (rename replaces a
// link at path; it does not follow it).
func commitPIDFile(tmp, path string) error {
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write pid file: %w", err)
	}
	return nil
}

// passCred sets SO_PASSCRED on a socket about to connect (a net.Dialer's
// Control).
func passCred(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt SO_PASSCRED", serr)
}
