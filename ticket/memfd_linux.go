package ticket

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The memfd format: magic, the number of keys (uint32, big endian), four
// zero bytes, then per key, newest first, the time it began to encrypt (unix
// nanoseconds, int64 big endian) and its 32 bytes.
const (
	magic     = "ZDTICKT1"
	headerLen = 16
	entryLen  = 8 + 32
	// memfdName is the memfd's name (seen in /proc/PID/fd): it names the
	// content, not a file.
	memfdName = FDName
	// seals are the seals Export sets and Import requires: the content
	// can no longer change, and no seal can be taken back.
	seals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
)

// Export returns k's keys in a new sealed memfd (close-on-exec), for a
// successor (package handoff sends it over the handoff socket) or for
// systemd's fd store; the caller owns the file and closes it. Its content
// can no longer be changed, by anyone.
func (k *Keys) Export() (*os.File, error) {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, ErrClosed
	}
	b := make([]byte, headerLen+entryLen*len(k.keys))
	copy(b, magic)
	binary.BigEndian.PutUint32(b[8:], uint32(len(k.keys)))
	for i, kk := range k.keys {
		e := b[headerLen+i*entryLen:]
		binary.BigEndian.PutUint64(e, uint64(kk.created.UnixNano()))
		copy(e[8:], kk.b[:])
	}
	k.mu.Unlock()
	defer clear(b)
	fd, err := unix.MemfdCreate(memfdName, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, os.NewSyscallError("memfd_create", err)
	}
	f := os.NewFile(uintptr(fd), "memfd:"+memfdName)
	if err := writeSealed(fd, b); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writeSealed writes b at the start of the memfd fd and seals it.
func writeSealed(fd int, b []byte) error {
	for off := 0; off < len(b); {
		n, err := unix.Pwrite(fd, b[off:], int64(off))
		if err != nil {
			return os.NewSyscallError("pwrite", err)
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return os.NewSyscallError("fcntl F_ADD_SEALS", err)
	}
	return nil
}

// Import replaces k's keys with those of f, a memfd of Export (the
// predecessor's), zeroing k's own: the predecessor's newest key goes on
// encrypting while it is young (see Refresh), the others decrypt, and the
// configs of Install get them. f stays the caller's. A file that is not a
// memfd sealed as Export seals it, or not of its format, is refused with an
// error matching ErrInvalid, and k is unchanged.
func (k *Keys) Import(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("ticket: import: %w", err)
	}
	var theirs []*key
	var ierr error
	if err := rc.Control(func(fd uintptr) { theirs, ierr = read(int(fd), k.now()) }); err != nil {
		return fmt.Errorf("ticket: import: %w", err)
	}
	if ierr != nil {
		return fmt.Errorf("ticket: import: %w", ierr)
	}
	return k.adopt(theirs)
}

// Check reports, without reading any key, whether f is a memfd of Export:
// named FDName, sealed as Export seals it, and of a size its format allows.
// It returns nil or an error matching ErrInvalid. package handoff/systemd
// checks so the fd it finds named FDName among the fds systemd passes (the
// fd store), before it hands it out. f stays the caller's.
func Check(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { _, cerr = check(int(fd)) }); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return cerr
}

// check verifies that fd is a sealed memfd named memfdName whose size fits
// the format, and returns its size.
func check(fd int) (int64, error) {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// An unlinked memfd reads "/memfd:NAME (deleted)".
	if name, _, _ := strings.Cut(strings.TrimPrefix(link, "/memfd:"), " "); !strings.HasPrefix(link, "/memfd:") || name != memfdName {
		return 0, fmt.Errorf("%w: %s, want /memfd:%s", ErrInvalid, link, memfdName)
	}
	got, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, os.NewSyscallError("fcntl F_GET_SEALS", err))
	}
	if got&seals != seals {
		return 0, fmt.Errorf("%w: seals %#x, want %#x", ErrInvalid, got, seals)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalid, os.NewSyscallError("fstat", err))
	}
	n := (st.Size - headerLen) / entryLen
	if st.Size < headerLen+entryLen || n > MaxKeys || st.Size != headerLen+n*entryLen {
		return 0, fmt.Errorf("%w: %d bytes", ErrInvalid, st.Size)
	}
	return st.Size, nil
}

// read checks that fd is a sealed memfd of Export and parses its keys.
func read(fd int, now time.Time) ([]*key, error) {
	size, err := check(fd)
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	defer clear(b)
	if _, err := unix.Pread(fd, b, 0); err != nil {
		return nil, os.NewSyscallError("pread", err)
	}
	return parse(b, now)
}

// parse decodes the memfd's content b.
func parse(b []byte, now time.Time) ([]*key, error) {
	if len(b) < headerLen || string(b[:8]) != magic {
		return nil, fmt.Errorf("%w: no header", ErrInvalid)
	}
	n := int(binary.BigEndian.Uint32(b[8:]))
	if n < 1 || n > MaxKeys || len(b) != headerLen+n*entryLen || binary.BigEndian.Uint32(b[12:]) != 0 {
		return nil, fmt.Errorf("%w: header declares %d keys in %d bytes", ErrInvalid, n, len(b))
	}
	keys := make([]*key, n)
	for i := range keys {
		e := b[headerLen+i*entryLen:]
		created := time.Unix(0, int64(binary.BigEndian.Uint64(e)))
		if created.After(now.Add(time.Minute)) || (i > 0 && created.After(keys[i-1].created)) {
			for _, k := range keys[:i] {
				clear(k.b[:])
			}
			return nil, fmt.Errorf("%w: key %d begins at %v (now %v)", ErrInvalid, i, created, now)
		}
		keys[i] = &key{created: created}
		copy(keys[i].b[:], e[8:])
	}
	return keys, nil
}

var _ io.Closer = (*Keys)(nil)
