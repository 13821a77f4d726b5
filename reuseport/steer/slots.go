package steer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/neterr"
)

// SetDraining marks slot i Draining (on) or Live again (off). A draining
// slot gets no new connections while another live slot has weight, and no
// migrated ones. It waits at most 5 s for the group lock.
func (g *Group) SetDraining(i int, on bool) error {
	return g.update("set draining", i, func(v *slotValue) error {
		v.State = uint32(Live)
		if on {
			v.State = uint32(Draining)
		}
		return nil
	})
}

// SetWeight sets slot i's share of new connections: weight/sum over the live
// slots. 0 sends it none; if every live slot has 0, the kernel's hash decides.
func (g *Group) SetWeight(i int, weight uint32) error {
	return g.update("set weight", i, func(v *slotValue) error {
		if weight > MaxWeight {
			return fmt.Errorf("%w: weight %d > %d", ErrBadSlot, weight, MaxWeight)
		}
		v.Weight = weight
		return nil
	})
}

// SetLoad records slot i's load (for example its open connections); a
// migration goes to the candidate with the lowest load, and so do new
// connections under BalanceLeastLoaded.
func (g *Group) SetLoad(i int, load uint32) error {
	return g.update("set load", i, func(v *slotValue) error {
		v.Load = load
		return nil
	})
}

// MarkDraining marks the slot of the listener c Draining: the interface
// package drain uses. It fails with ErrNotMember if c holds no slot.
func (g *Group) MarkDraining(c syscall.Conn) error {
	i, err := g.SlotOf(c)
	if err != nil {
		return neterr.OpText("steer mark draining", "tcp", g.addr.String(), err)
	}
	return g.SetDraining(i, true)
}

// SlotOf returns the slot that the listener c holds, found by its cookie.
func (g *Group) SlotOf(c syscall.Conn) (int, error) {
	if g.obj == nil {
		return -1, net.ErrClosed
	}
	cookie, err := cookieOf(c)
	if err != nil {
		return -1, err
	}
	var cv cookieValue
	err = g.obj.cookies.Lookup(cookie, &cv)
	if errors.Is(err, ebpf.ErrKeyNotExist) || err == nil && cv.Closed != 0 {
		return -1, fmt.Errorf("%w: socket cookie %d", ErrNotMember, cookie)
	}
	return int(cv.Slot), err
}

// SetMismatch changes what the program does with a migrating connection that
// no live member of its class can take.
func (g *Group) SetMismatch(mm Mismatch) error {
	if mm > MismatchHash {
		return neterr.OpText("steer set mismatch", "tcp", g.addr.String(), fmt.Errorf("%w: mismatch %d", ErrBadSlot, mm))
	}
	return g.setConfig("set mismatch", func(cv *configValue) { cv.Mismatch = uint32(mm) })
}

// SetBalance changes how the program spreads new connections.
func (g *Group) SetBalance(b Balance) error {
	if b > BalanceLeastLoaded {
		return neterr.OpText("steer set balance", "tcp", g.addr.String(), fmt.Errorf("%w: balance %d", ErrBadSlot, b))
	}
	return g.setConfig("set balance", func(cv *configValue) { cv.Balance = uint32(b) })
}

func (g *Group) setConfig(op string, f func(*configValue)) error {
	if g.obj == nil {
		return neterr.OpText("steer "+op, "tcp", g.addr.String(), net.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	err := withLock(ctx, g.dir, false, func() error {
		var cv configValue
		if err := g.obj.config.Lookup(uint32(0), &cv); err != nil {
			return err
		}
		f(&cv)
		return g.obj.config.Put(uint32(0), cv)
	})
	if err != nil {
		return neterr.OpText("steer "+op, "tcp", g.addr.String(), err)
	}
	return nil
}

// Slots reads the whole slot table with each slot's counters (summed over
// CPUs). It reads without the lock: each slot is consistent, the table is a
// snapshot taken slot by slot.
func (g *Group) Slots() ([]Slot, error) {
	if g.obj == nil {
		return nil, neterr.OpText("steer slots", "tcp", g.addr.String(), net.ErrClosed)
	}
	out := make([]Slot, g.n)
	for i := range out {
		s, err := g.slot(i)
		if err != nil {
			return nil, neterr.OpText("steer slots", "tcp", g.addr.String(), err)
		}
		out[i] = s
	}
	return out, nil
}

func (g *Group) slot(i int) (Slot, error) {
	v, err := g.readSlot(i)
	if err != nil {
		return Slot{}, err
	}
	s := Slot{Index: i, State: State(v.State), Class: v.Class, Weight: v.Weight, Load: v.Load}
	if err := g.obj.sockets.Lookup(uint32(i), &s.Cookie); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return Slot{}, err
	}
	var per []counterValue
	if err := g.obj.counters.Lookup(uint32(i), &per); err != nil {
		return Slot{}, err
	}
	for _, c := range per {
		s.Counters.Steered += c.Steered
		s.Counters.MigratedIn += c.MigratedIn
		s.Counters.MigratedOut += c.MigratedOut
		s.Counters.Dropped += c.Dropped
	}
	return s, nil
}

// Prune frees the slots whose socket is gone (its process died or closed it
// without Member.Close). Join does it too.
func (g *Group) Prune(ctx context.Context) error {
	if g.obj == nil {
		return neterr.OpText("steer prune", "tcp", g.addr.String(), net.ErrClosed)
	}
	err := withLock(ctx, g.dir, false, func() error {
		g.prune()
		return nil
	})
	if err != nil {
		return neterr.OpText("steer prune", "tcp", g.addr.String(), err)
	}
	return nil
}

// SetDraining marks the member's slot Draining (on) or Live (off).
func (m *Member) SetDraining(on bool) error { return m.g.SetDraining(m.slot, on) }

// SetWeight sets the member's share of new connections.
func (m *Member) SetWeight(weight uint32) error { return m.g.SetWeight(m.slot, weight) }

// SetLoad records the member's load for migration choices.
func (m *Member) SetLoad(load uint32) error { return m.g.SetLoad(m.slot, load) }

// Counters reads the member's counters.
func (m *Member) Counters() (Counters, error) {
	if m.g == nil || m.g.obj == nil {
		return Counters{}, net.ErrClosed
	}
	s, err := m.g.slot(m.slot)
	return s.Counters, err
}

// MarkDraining marks the slot of the listener c Draining, like
// Group.MarkDraining.
func (m *Member) MarkDraining(c syscall.Conn) error {
	if m.g == nil {
		return net.ErrClosed
	}
	return m.g.MarkDraining(c)
}
