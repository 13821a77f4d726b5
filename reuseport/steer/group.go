package steer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Group is a handle on the pinned program and maps of one reuseport group:
// what steering adds to the group the kernel shows (reuseport.Group, from
// reuseport.Inspect, describes its listeners). It owns its fds (not the pins); Close releases them. Every method that changes
// the slot table takes the group's lock (flock on its pin directory), so
// processes sharing the group never overwrite each other's changes.
type Group struct {
	addr netip.AddrPort
	dir  string
	n    int
	obj  *objects
	log  *zap.Logger
}

// Addr returns the address of the group.
func (g *Group) Addr() netip.AddrPort { return g.addr }

// Dir returns the bpffs directory holding the group's pins.
func (g *Group) Dir() string { return g.dir }

// Len returns the size of the slot table.
func (g *Group) Len() int { return g.n }

// Close releases the group's fds; the pins stay. Safe to call twice.
func (g *Group) Close() error {
	if g == nil || g.obj == nil {
		return nil
	}
	err := g.obj.Close()
	g.obj = nil
	return err
}

// Open opens the group pinned for address ("ip:port") in the calling
// thread's network namespace, without joining it: for observers such as
// `zerodrop doctor` or a supervisor that marks members draining. A missing
// group gives an error matching ErrNoGroup. Needs CAP_BPF (or root).
func (c *Config) Open(ctx context.Context, address string) (*Group, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, neterr.OpText("steer open", "tcp", address, err)
	}
	dir, err := c.groupDir(ap)
	if err != nil {
		return nil, neterr.OpText("steer open", "tcp", ap.String(), err)
	}
	var g *Group
	err = withLock(ctx, dir, false, func() error {
		obj, err := openPinned(dir)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNoGroup, dir)
		}
		if err != nil {
			return permission(err)
		}
		g = &Group{addr: ap, dir: dir, n: int(obj.sockets.MaxEntries()), obj: obj, log: c.logger()}
		return nil
	})
	if err != nil {
		return nil, neterr.OpText("steer open", "tcp", ap.String(), err)
	}
	return g, nil
}

// groupDir checks that c.Dir is on bpffs and returns the group's directory:
// Dir/<netns inode>/<ip>-<port>, with the dots of an IPv4 address as "_".
func (c *Config) groupDir(ap netip.AddrPort) (string, error) {
	base := c.Dir
	if base == "" {
		base = DefaultDir
	}
	if err := checkBPFFS(base); err != nil {
		return "", err
	}
	ns, err := sockdiag.NetNS()
	if err != nil {
		return "", err
	}
	// bpffs refuses names with dots.
	name := strings.ReplaceAll(ap.Addr().Unmap().String(), ".", "_") + "-" + strconv.Itoa(int(ap.Port()))
	return filepath.Join(base, strconv.FormatUint(ns, 10), name), nil
}

// checkBPFFS checks the nearest existing ancestor of dir (dir itself if it
// exists) is on a bpf filesystem.
func checkBPFFS(dir string) error {
	p := filepath.Clean(dir)
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			if st.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%w: %s is on a filesystem of type %#x; mount one: mount -t bpf bpf /sys/fs/bpf", ErrNoBPFFS, p, st.Type)
			}
			return nil
		}
		if errors.Is(err, os.ErrPermission) {
			return permission(os.NewSyscallError("statfs "+p, err))
		}
		if !errors.Is(err, unix.ENOENT) || p == "/" || p == "." {
			return fmt.Errorf("%w: %w", ErrNoBPFFS, os.NewSyscallError("statfs "+p, err))
		}
		p = filepath.Dir(p)
	}
}

// withLock creates dir if asked (and missing) and runs f holding an exclusive
// flock on it, waiting for it until ctx ends.
func withLock(ctx context.Context, dir string, mkdir bool, f func() error) error {
	if mkdir {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return permission(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("%w: %s", ErrNoGroup, dir)
	}
	if err != nil {
		return permission(os.NewSyscallError("open "+dir, err))
	}
	defer unix.Close(fd)
	if err := flock(ctx, fd, dir); err != nil {
		return err
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return os.NewSyscallError("fstat "+dir, err)
	}
	if unix.Stat(dir, &b) != nil || a.Ino != b.Ino {
		// The last member removed the directory while we waited.
		if !mkdir {
			return fmt.Errorf("%w: %s", ErrNoGroup, dir)
		}
		unix.Flock(fd, unix.LOCK_UN)
		return withLock(ctx, dir, mkdir, f)
	}
	return f()
}

// lockTimeout bounds the wait for the group lock of calls without a context.
// The lock is held only for a few map operations.
const lockTimeout = 5 * time.Second

// flock takes an exclusive flock on fd, polling until ctx ends.
func flock(ctx context.Context, fd int, dir string) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return os.NewSyscallError("flock "+dir, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %s: %w", dir, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// permission makes EPERM/EACCES from bpf() match ErrPermission as well.
func permission(err error) error {
	if errors.Is(err, os.ErrPermission) && !errors.Is(err, ErrPermission) {
		return fmt.Errorf("%w: %w", ErrPermission, err)
	}
	return err
}

// readSlot reads slot i (no lock needed: one map look-up is atomic).
func (g *Group) readSlot(i int) (slotValue, error) {
	var v slotValue
	err := g.obj.slots.Lookup(uint32(i), &v)
	return v, err
}

// update changes slot i under the lock: f edits the value.
func (g *Group) update(op string, i int, f func(*slotValue) error) error {
	if g.obj == nil {
		return neterr.OpText("steer "+op, "tcp", g.addr.String(), net.ErrClosed)
	}
	if i < 0 || i >= g.n {
		return neterr.OpText("steer "+op, "tcp", g.addr.String(), fmt.Errorf("%w: slot %d of %d", ErrBadSlot, i, g.n))
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	err := withLock(ctx, g.dir, false, func() error {
		v, err := g.readSlot(i)
		if err != nil {
			return err
		}
		if v.State == uint32(Free) {
			return fmt.Errorf("%w: slot %d is free", ErrNotMember, i)
		}
		if err := f(&v); err != nil {
			return err
		}
		return g.obj.slots.Update(uint32(i), v, ebpf.UpdateExist)
	})
	if err != nil {
		return neterr.OpText("steer "+op, "tcp", g.addr.String(), err)
	}
	return nil
}
