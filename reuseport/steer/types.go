package steer

import (
	"go.uber.org/zap"
)

// DefaultDir is where groups are pinned unless Config.Dir says otherwise. It
// must be on a bpf filesystem (mount -t bpf bpf /sys/fs/bpf).
const DefaultDir = "/sys/fs/bpf/zerodrop"

// Limits of a group.
const (
	DefaultSlots  = 16      // slot table size when Config.Slots is 0
	MaxSlots      = 64      // largest slot table
	DefaultWeight = 100     // weight of a member that just joined
	MaxWeight     = 1 << 20 // largest weight SetWeight accepts
)

// Mismatch says what the program does with a connection migrating from a
// closing member when no live member of the same option class can take it.
type Mismatch uint32

const (
	// MismatchDrop returns SK_DROP: the connection is reset (the kernel counts
	// TcpExt.TCPMigrateReqFailure) and never reaches a listener with other
	// options. The default.
	MismatchDrop Mismatch = 0
	// MismatchHash returns SK_PASS: the kernel's hash picks among the members
	// still in the group, whatever their options.
	MismatchHash Mismatch = 1
)

// Balance says how the program spreads new connections over Live slots.
type Balance uint32

const (
	// BalanceWeighted picks a slot at random with probability weight/sum of
	// the Live weights. The default.
	BalanceWeighted Balance = 0
	// BalanceLeastLoaded considers only the Live slots with a weight whose
	// load (as the members report it with SetLoad) is the lowest, and picks
	// among them by weight. Loads are what the members last reported: a
	// burst between two reports all goes to the same slot.
	BalanceLeastLoaded Balance = 1
)

// Config says where a group's program is pinned and how the group that the
// first member creates is set up. The zero value pins under DefaultDir with
// DefaultSlots slots, MismatchDrop and BalanceWeighted, and logs nothing.
type Config struct {
	// Dir is a directory on a bpf filesystem; the group lives in
	// Dir/<netns inode>/<address>.
	Dir string
	// Slots is the slot table size of a new group (1..MaxSlots). Members that
	// join an existing group use its size.
	Slots int
	// Mismatch is the migration fallback of a new group; see Group.SetMismatch.
	Mismatch Mismatch
	// Balance is how a new group spreads new connections; see Group.SetBalance.
	Balance Balance
	// Logger receives what cannot be returned (stale slots cleaned); nil
	// means no logging. Nothing is logged on the connection path.
	Logger *zap.Logger
}

func (c *Config) logger() *zap.Logger {
	if c == nil || c.Logger == nil {
		return zap.NewNop()
	}
	return c.Logger
}

// State is a slot's state as the program sees it.
type State uint32

// Slot states.
const (
	Free     State = 0 // no member
	Live     State = 1 // takes new and migrated connections
	Draining State = 2 // takes nothing new; its queue is being emptied
)

// String returns "free", "live" or "draining".
func (s State) String() string {
	switch s {
	case Free:
		return "free"
	case Live:
		return "live"
	case Draining:
		return "draining"
	}
	return "unknown"
}

// Counters are what the program counted for one slot since it was taken.
type Counters struct {
	Steered     uint64 `json:"steered"`      // new connections sent to the slot
	MigratedIn  uint64 `json:"migrated_in"`  // connections migrated to the slot
	MigratedOut uint64 `json:"migrated_out"` // connections migrated away from its closing listener
	Dropped     uint64 `json:"dropped"`      // migrating connections reset (MismatchDrop)
}

// Slot is one entry of the slot table.
type Slot struct {
	Index    int      `json:"index"`
	State    State    `json:"state"`
	Class    uint32   `json:"class"`  // option class; see ClassOf
	Weight   uint32   `json:"weight"` // share of new connections
	Load     uint32   `json:"load"`   // as reported by the member; lower wins migrations
	Cookie   uint64   `json:"cookie"` // socket cookie of the member, 0 if none
	Counters Counters `json:"counters"`
}
