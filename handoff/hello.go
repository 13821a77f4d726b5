package handoff

import (
	"fmt"
	"os"
)

// Every conversation on a handoff socket (and a ConnListener's) opens with
// a hello from each side; the version they then speak is the highest both
// know (see "Versions" in the wire protocol, wire.go).

// baseVersion is the version every hello names: a predecessor of version 1
// refuses any other (and counts that as a failed handoff), so a successor
// says what more it speaks in MaxVersion, which such a predecessor refuses
// as an unknown key before anything else (no failure counted).
const baseVersion = 1

// helloFrame is our hello frame. A successor's names the highest version it
// speaks and asks for option values, unless the predecessor refused those
// keys (values, maxVersion false then).
func helloFrame(role string, gen uint64, values, maxVersion bool) *frame {
	f := &frame{Type: typeHello, Version: baseVersion, Role: role, PID: os.Getpid(), UID: uint32(os.Geteuid()), Generation: gen,
		Handoff: role != roleObserver, Options: role == roleSuccessor && values}
	if role == roleSuccessor && maxVersion {
		f.MaxVersion = Version
	}
	return f
}

// agree returns the version both sides of a conversation speak, given the
// peer's hello: the highest of its versions that we speak too.
func agree(f *frame) (int, error) {
	if f.Version < 1 || f.Version > Version {
		return 0, &FrameError{Type: typeHello, Err: ErrVersion, Detail: fmt.Sprintf("peer speaks version %d, we speak 1 to %d", f.Version, Version)}
	}
	return min(Version, max(f.Version, f.MaxVersion)), nil
}
