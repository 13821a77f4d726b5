package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// errUnsafe is what the first generation's checks wrap when it will not
// write its certificate and private key: the directory is not ours alone,
// or a name in it is not a regular file of ours.
var errUnsafe = errors.New("refusing to write the private key")

// privateDir opens dir, creating it (and its parents) with mode 0700 if it
// is missing, and checks that it is a directory and not a symlink, owned by
// our effective uid, with no permission for group or others. The default
// directory has a predictable name in a shared directory ($TMPDIR): another
// user can create it first and plant a symlink where the key goes, and
// MkdirAll accepts a directory that exists whoever made it. The check runs
// on the opened directory (O_NOFOLLOW), and files are then made relative to
// it, so a rename of dir after the check changes nothing. The caller closes
// the returned fd.
func privateDir(dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return -1, fmt.Errorf("%w: %w", errUnsafe, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil { // ELOOP or ENOTDIR: a symlink or a file stands there
		return -1, fmt.Errorf("%w: %s: %w", errUnsafe, dir, os.NewSyscallError("open", err))
	}
	var st unix.Stat_t
	why := ""
	switch err := unix.Fstat(fd, &st); {
	case err != nil:
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %s: %w", errUnsafe, dir, os.NewSyscallError("fstat", err))
	case st.Uid != uint32(os.Geteuid()):
		why = fmt.Sprintf("belongs to uid %d, not to us (uid %d): another user may have made it", st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		why = fmt.Sprintf("has mode %#o; want 0700", st.Mode&0o7777)
	default:
		return fd, nil
	}
	unix.Close(fd)
	return -1, fmt.Errorf("%w: directory %s %s", errUnsafe, dir, why)
}

// createIn writes data to a new file name in the directory dirfd (dir is its
// path, for errors), with mode perm. A regular file of ours left there by an
// earlier run is removed first; anything else (a symlink, a FIFO, another
// user's file) is refused, and the new file is made with O_EXCL|O_NOFOLLOW,
// so nothing is ever written through a link.
func createIn(dirfd int, dir, name string, data []byte, perm uint32) error {
	path := filepath.Join(dir, name)
	var st unix.Stat_t
	switch err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return fmt.Errorf("%w: %w", errUnsafe, &os.PathError{Op: "lstat", Path: path, Err: err})
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%w: %s exists and is not a regular file (mode %#o)", errUnsafe, path, st.Mode)
	case st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%w: %s belongs to uid %d, not to us", errUnsafe, path, st.Uid)
	default:
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return &os.PathError{Op: "unlink", Path: path, Err: err}
		}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnsafe, &os.PathError{Op: "create", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
