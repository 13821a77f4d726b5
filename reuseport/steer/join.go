package steer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Member is one listener's registration in its group: a slot of the table.
// It does not own the listener. Close the listener first, then the Member:
// while its cookie is registered, the program still knows the class of the
// connections a closing listener leaves behind.
type Member struct {
	g      *Group
	slot   int
	cookie uint64
}

// Slot returns the member's slot index.
func (m *Member) Slot() int { return m.slot }

// Group returns the member's handle on its group, valid until m.Close.
func (m *Member) Group() *Group { return m.g }

// Join registers the listener l (a *reuseport.Listener or any TCP listener
// with SO_REUSEPORT) in the steering group of its address, in the calling
// thread's network namespace. The first member creates the maps, loads the
// program and pins them under c.Dir; later members, in any process, open the
// pins. Join then takes a free slot (after freeing the slots of sockets that
// are gone), marks it Live with DefaultWeight, and attaches the program to the
// group (SO_ATTACH_REUSEPORT_EBPF). The caller keeps owning l.
//
// Linux 5.14+; needs CAP_BPF and CAP_NET_ADMIN (or root) and a bpf
// filesystem at c.Dir. MPTCP listeners are refused (reuseport.ErrNotSupported).
func (c *Config) Join(ctx context.Context, l syscall.Conn) (*Member, error) {
	si, err := inspect(l)
	if err != nil {
		return nil, neterr.OpText("steer join", "tcp", si.addr.String(), err)
	}
	m, err := c.join(ctx, l, si)
	if err != nil {
		return nil, neterr.OpText("steer join", "tcp", si.addr.String(), err)
	}
	return m, nil
}

func (c *Config) join(ctx context.Context, l syscall.Conn, si sockInfo) (*Member, error) {
	n := c.Slots
	if n == 0 {
		n = DefaultSlots
	}
	if n < 0 || n > MaxSlots || c.Mismatch > MismatchHash || c.Balance > BalanceLeastLoaded {
		return nil, fmt.Errorf("%w: Slots %d (1..%d), Mismatch %d, Balance %d", ErrBadSlot, c.Slots, MaxSlots, c.Mismatch, c.Balance)
	}
	dir, err := c.groupDir(si.addr)
	if err != nil {
		return nil, err
	}
	var m *Member
	err = withLock(ctx, dir, true, func() error {
		g, err := c.openOrCreate(dir, si.addr, n)
		if err != nil {
			// Leave no empty directories behind (os.Remove spares full ones).
			os.Remove(dir)
			os.Remove(filepath.Dir(dir))
			return permission(err)
		}
		m, err = g.register(l, si)
		if err != nil {
			g.removeIfEmpty()
			g.Close()
			return err
		}
		return nil
	})
	return m, err
}

// openOrCreate opens the pinned group in dir, or creates and pins it.
func (c *Config) openOrCreate(dir string, ap netip.AddrPort, n int) (*Group, error) {
	obj, err := openPinned(dir)
	if errors.Is(err, os.ErrNotExist) {
		unpin(dir) // the pins of a creation that died half-way, if any
		obj, err = create(uint32(n), configValue{Mismatch: uint32(c.Mismatch), Balance: uint32(c.Balance)})
		if err == nil {
			if err = obj.pin(dir); err != nil {
				obj.Close()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return &Group{addr: ap, dir: dir, n: int(obj.sockets.MaxEntries()), obj: obj, log: c.logger()}, nil
}

// register takes a free slot for l and attaches the program. Lock held.
func (g *Group) register(l syscall.Conn, si sockInfo) (*Member, error) {
	g.prune()
	slot := -1
	for i := 0; i < g.n && slot < 0; i++ {
		v, err := g.readSlot(i)
		if err != nil {
			return nil, err
		}
		if v.State == uint32(Free) {
			slot = i
		}
	}
	if slot < 0 {
		return nil, fmt.Errorf("%w: all %d slots hold live sockets", ErrSlotsFull, g.n)
	}
	m := &Member{g: g, slot: slot, cookie: si.cookie}
	if err := m.fill(l, si.class); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// fill puts the socket in the sockarray, the slot table and the cookie map,
// then attaches the program.
func (m *Member) fill(l syscall.Conn, class uint32) error {
	o, key := m.g.obj, uint32(m.slot)
	err := linux.Control(l, func(fd int) error {
		return o.sockets.Update(key, uint64(fd), ebpf.UpdateAny)
	})
	if err != nil {
		return fmt.Errorf("add socket to slot %d: %w", m.slot, err)
	}
	zero := make([]counterValue, ebpf.MustPossibleCPU())
	if err := o.counters.Put(key, zero); err != nil {
		return fmt.Errorf("reset counters of slot %d: %w", m.slot, err)
	}
	cv := cookieValue{Slot: key, Class: class}
	err = o.cookies.Put(m.cookie, cv)
	if errors.Is(err, unix.E2BIG) && m.g.evictCookies() > 0 {
		err = o.cookies.Put(m.cookie, cv)
	}
	if err != nil {
		return fmt.Errorf("register cookie: %w", err)
	}
	v := slotValue{State: uint32(Live), Class: class, Weight: DefaultWeight}
	if err := o.slots.Put(key, v); err != nil {
		return fmt.Errorf("mark slot %d live: %w", m.slot, err)
	}
	return attach(l, o.prog.FD())
}

// release frees the member's slot if it still holds it. Lock held.
func (m *Member) release() error {
	o, key := m.g.obj, uint32(m.slot)
	var errs []error
	var cookie uint64
	if o.sockets.Lookup(key, &cookie) == nil && cookie == m.cookie {
		errs = append(errs, o.sockets.Delete(key))
	}
	var cv cookieValue
	if o.cookies.Lookup(m.cookie, &cv) == nil && cv.Slot == key && cv.Closed == 0 {
		cv.Closed = now()
		errs = append(errs, o.cookies.Put(m.cookie, cv), o.slots.Put(key, slotValue{}))
	}
	return errors.Join(errs...)
}

// prune frees the slots whose socket is gone (closed, or its process died)
// and forgets cookies of sockets no longer in the sockarray. Lock held.
func (g *Group) prune() {
	for i := 0; i < g.n; i++ {
		v, err := g.readSlot(i)
		if err != nil || v.State == uint32(Free) {
			continue
		}
		var cookie uint64
		if err := g.obj.sockets.Lookup(uint32(i), &cookie); errors.Is(err, ebpf.ErrKeyNotExist) {
			g.obj.slots.Put(uint32(i), slotValue{})
			g.log.Info("freed the slot of a socket that is gone", zap.Int("slot", i), zap.String("addr", g.addr.String()))
		}
	}
	g.pruneCookies()
}

// cookieGrace is how long the cookie of a socket that left stays known to the
// program: longer than a handshake in flight at close takes to complete.
const cookieGrace = 30 // seconds

func now() uint32 { return uint32(time.Now().Unix()) }

// pruneCookies stamps the cookies of sockets no longer in the sockarray and
// deletes those stamped more than cookieGrace ago. Lock held.
func (g *Group) pruneCookies() {
	var (
		cookie uint64
		cv     cookieValue
		stamp  = map[uint64]cookieValue{}
		stale  []uint64
	)
	t := now()
	it := g.obj.cookies.Iterate()
	for it.Next(&cookie, &cv) {
		var cur uint64
		switch {
		case cv.Closed != 0 && t-cv.Closed > cookieGrace:
			stale = append(stale, cookie)
		case cv.Closed == 0 && (g.obj.sockets.Lookup(cv.Slot, &cur) != nil || cur != cookie):
			cv.Closed = t
			stamp[cookie] = cv
		}
	}
	for c, v := range stamp {
		g.obj.cookies.Put(c, v)
	}
	for _, c := range stale {
		g.obj.cookies.Delete(c)
	}
}

// evictCookies makes room in a full cookies map (members joining and leaving
// faster than cookiesPerSlot per slot in cookieGrace): it forgets the older
// half of the cookies of sockets that left, oldest first, and returns how
// many. Live members' cookies stay. Lock held.
func (g *Group) evictCookies() int {
	type left struct {
		cookie uint64
		closed uint32
	}
	var (
		gone   []left
		cookie uint64
		cv     cookieValue
	)
	it := g.obj.cookies.Iterate()
	for it.Next(&cookie, &cv) {
		if cv.Closed != 0 {
			gone = append(gone, left{cookie, cv.Closed})
		}
	}
	slices.SortFunc(gone, func(a, b left) int { return cmp.Compare(a.closed, b.closed) })
	n := 0
	for _, c := range gone[:(len(gone)+1)/2] {
		if g.obj.cookies.Delete(c.cookie) == nil {
			n++
		}
	}
	if n > 0 {
		g.log.Debug("forgot the cookies of members that left, to make room", zap.Int("cookies", n), zap.String("addr", g.addr.String()))
	}
	return n
}

// Close gives the slot back (if the member still holds it), removes the pins
// when no slot is taken any more, and releases the fds. Call it after closing
// the listener; if the listener is still open, it leaves the program's view
// (the kernel's hash may still pick it). Safe to call twice.
func (m *Member) Close() error {
	g := m.g
	if g == nil || g.obj == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	err := withLock(ctx, g.dir, false, func() error {
		return errors.Join(m.release(), g.removeIfEmpty())
	})
	err = errors.Join(err, g.Close())
	if err != nil {
		return neterr.OpText("steer close", "tcp", g.addr.String(), err)
	}
	return nil
}

// removeIfEmpty removes the pins and the directories when no slot is taken.
// Lock held.
func (g *Group) removeIfEmpty() error {
	if !g.empty() {
		return nil
	}
	err := errors.Join(unpin(g.dir), os.Remove(g.dir))
	os.Remove(filepath.Dir(g.dir)) // the netns directory, if now empty
	return err
}

// empty reports whether no slot is taken. Lock held.
func (g *Group) empty() bool {
	g.prune()
	for i := 0; i < g.n; i++ {
		if v, err := g.readSlot(i); err != nil || v.State != uint32(Free) {
			return false
		}
	}
	return true
}
