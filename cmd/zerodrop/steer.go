package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// steerTimeout bounds the wait for one steering group's lock.
const steerTimeout = 2 * time.Second

// steerInfo is the steering group pinned for a reuseport group: its pin
// directory and its taken slots.
type steerInfo struct {
	Dir   string      `json:"dir"`
	Slots []steerSlot `json:"slots"`
}

// steerSlot is one taken slot of a steering group, with its counters.
type steerSlot struct {
	Index int    `json:"index"`
	State string `json:"state"` // "live" or "draining"
	// Inode is the listener holding the slot, found by its socket cookie;
	// 0 when no listener of the group has it (closed, member not yet
	// closed).
	Inode       uint64 `json:"inode"`
	Cookie      uint64 `json:"cookie"`
	Class       uint32 `json:"class"`
	Weight      uint32 `json:"weight"`
	Load        uint32 `json:"load"`
	Steered     uint64 `json:"steered"`
	MigratedIn  uint64 `json:"migrated_in"`
	MigratedOut uint64 `json:"migrated_out"`
	Dropped     uint64 `json:"dropped"`
}

// readSteerSlots opens the steering group pinned under dir for addr without
// joining it and reads its slot table.
func readSteerSlots(ctx context.Context, dir string, addr netip.AddrPort) ([]steer.Slot, string, error) {
	ctx, cancel := context.WithTimeout(ctx, steerTimeout)
	defer cancel()
	cfg := steer.Config{Dir: dir}
	g, err := cfg.Open(ctx, addr.String())
	if err != nil {
		return nil, "", err
	}
	defer g.Close()
	slots, err := g.Slots()
	return slots, g.Dir(), err
}

// readSteer fills in the steering group of each group that has one. Errors
// do not fail doctor: they become notes, once for errors every group would
// share (no bpffs, no permission).
func readSteer(ctx context.Context, k kernel, dir string, groups []group) []string {
	var notes []string
	for i := range groups {
		g := &groups[i]
		addr, err := netip.ParseAddr(g.Address)
		if err != nil {
			notes = append(notes, fmt.Sprintf("steering of %s not read: %v", hostPort(*g), err))
			continue
		}
		slots, pins, err := k.steer(ctx, dir, netip.AddrPortFrom(addr, g.Port))
		switch {
		case errors.Is(err, steer.ErrNoGroup):
			continue
		case errors.Is(err, steer.ErrNoBPFFS), errors.Is(err, steer.ErrPermission):
			return append(notes, fmt.Sprintf("steering counters not read (--bpffs %s): %v", dir, err))
		case err != nil:
			notes = append(notes, fmt.Sprintf("steering of %s not read: %v", hostPort(*g), err))
			continue
		}
		g.Steer = steerOf(pins, slots, g.Members)
	}
	return notes
}

// steerOf keeps the taken slots and names the listener holding each.
func steerOf(pins string, slots []steer.Slot, members []member) *steerInfo {
	inodes := map[uint64]uint64{}
	for _, m := range members {
		if m.Cookie != 0 {
			inodes[m.Cookie] = m.Inode
		}
	}
	s := &steerInfo{Dir: pins, Slots: []steerSlot{}}
	for _, sl := range slots {
		if sl.State == steer.Free {
			continue
		}
		s.Slots = append(s.Slots, steerSlot{
			Index: sl.Index, State: sl.State.String(), Inode: inodes[sl.Cookie], Cookie: sl.Cookie,
			Class: sl.Class, Weight: sl.Weight, Load: sl.Load,
			Steered: sl.Counters.Steered, MigratedIn: sl.Counters.MigratedIn,
			MigratedOut: sl.Counters.MigratedOut, Dropped: sl.Counters.Dropped,
		})
	}
	return s
}

// steered reports whether a steering program with a live slot serves g: it
// migrates a closing member's queue whatever tcp_migrate_req says.
func steered(g group) bool {
	if g.Steer == nil {
		return false
	}
	for _, s := range g.Steer.Slots {
		if s.State == steer.Live.String() {
			return true
		}
	}
	return false
}
