package steer

import "errors"

// Sentinel errors. Errors returned by this package are *net.OpError values
// (Op, Net, Addr of the group) wrapping a cause that matches one of these, a
// syscall error, or reuseport.ErrNotSupported.
var (
	// ErrNoBPFFS: the pin directory is not on a bpf filesystem.
	ErrNoBPFFS = errors.New("not on a bpf filesystem")
	// ErrPermission: the kernel refused a bpf() call; loading an SK_REUSEPORT
	// program needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN). Errors
	// matching it also match os.ErrPermission.
	ErrPermission = errors.New("bpf needs CAP_BPF and CAP_NET_ADMIN")
	// ErrSlotsFull: every slot of the group's table holds a live socket.
	ErrSlotsFull = errors.New("slot table full")
	// ErrNoGroup: no program is pinned for the address.
	ErrNoGroup = errors.New("no steering group pinned for this address")
	// ErrNotMember: the socket holds no slot of the group.
	ErrNotMember = errors.New("socket holds no slot of the group")
	// ErrIncompatible: the pins have another layout (another version of this
	// package made them); remove them (rm -r the group directory) once no
	// member uses them.
	ErrIncompatible = errors.New("pinned group has an incompatible layout")
	// ErrBadSlot: a slot index or value out of range.
	ErrBadSlot = errors.New("slot out of range")
)
