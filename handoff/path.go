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

	"golang.org/x/sys/unix"
)

// abstract reports whether path names the abstract namespace ("@name").
func abstract(path string) bool { return len(path) > 0 && path[0] == '@' }

// checkDir refuses a socket path whose directory others may write to, or that
// belongs to another user than us or root: anyone who can replace the file can
// pose as our predecessor. Abstract names have no file; SO_PEERCRED guards them.
func checkDir(path string) error {
	if abstract(path) {
		return nil
	}
	dir := filepath.Dir(path)
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return &net.OpError{Op: "check", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"}, Err: os.NewSyscallError("stat", err)}
	}
	e := &InsecurePathError{Path: path, Dir: dir, Mode: os.FileMode(st.Mode & 0o7777), UID: st.Uid}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		e.Why = "is not a directory"
	case st.Mode&0o022 != 0:
		e.Why = "is writable by group or others; use a directory of mode 0700 or 0755"
	case st.Uid != uint32(os.Geteuid()) && st.Uid != 0:
		e.Why = "belongs to another user"
	default:
		return nil
	}
	return e
}

// dial connects to the predecessor. ok is false when nobody serves path: no
// file, or a stale file left by a dead process (ECONNREFUSED).
func dial(ctx context.Context, path string) (c *net.UnixConn, ok bool, err error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	switch {
	case err == nil:
		return nc.(*net.UnixConn), true, nil
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return nil, false, nil
	}
	return nil, false, err
}

// allowed checks a peer's credentials against our euid and the allow-list.
func allowed(cred *unix.Ucred, allow []uint32) error {
	list := append([]uint32{uint32(os.Geteuid())}, allow...)
	if slices.Contains(list, cred.Uid) {
		return nil
	}
	return &PeerError{PID: cred.Pid, UID: cred.Uid, GID: cred.Gid, Allowed: list}
}

// listenHandoff creates the listening socket for our successor. For a file
// path it binds a private temporary name, chmods it 0600 and returns the name
// to publish later with rename(2) (atomic: a successor never finds no file).
func listenHandoff(path string) (*net.UnixListener, string, error) {
	name := path
	if !abstract(path) {
		name = filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+"."+strconv.Itoa(os.Getpid())+".tmp")
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

// unpublish removes path if it is still the file we published.
func unpublish(path string, ino uint64) {
	var st unix.Stat_t
	if ino != 0 && unix.Lstat(path, &st) == nil && st.Ino == ino {
		os.Remove(path)
	}
}

// writePIDFile replaces path atomically with our pid.
func writePIDFile(path string) error {
	tmp := path + "." + strconv.Itoa(os.Getpid()) + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write pid file: %w", err)
	}
	return nil
}
