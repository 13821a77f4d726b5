package reuseport

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/zerodrop/zerodrop/internal/linux"
	"syscall"
)

// OptionValue is one option as the kernel reports it.
type OptionValue struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Digest is the canonical option set of a live socket, read from the kernel with
// getsockopt: kind (domain, type, protocol), backlog for listeners, and every
// option of Options. Two sockets that should share a group or a migrated
// connection have equal digests.
type Digest struct {
	Values []OptionValue `json:"values"`
}

// ReadDigest reads the digest of a live socket (ours, one received from another
// process or from systemd). It does not take ownership of the socket.
func ReadDigest(c syscall.Conn) (Digest, error) {
	var d Digest
	err := linux.Control(c, func(fd int) error {
		vals, _, err := readOptions(fd)
		d.Values = vals
		return err
	})
	if err != nil {
		return Digest{}, fmt.Errorf("read digest: %w", err)
	}
	return d, nil
}

// String returns a short stable hash of the digest, "sha256:" and 16 hex digits.
func (d Digest) String() string {
	b := make([]byte, 0, 512)
	for _, v := range d.Values {
		b = append(append(append(append(b, v.Name...), '='), v.Value...), '\n')
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// Compare returns nil when got equals d, or an *OptionMismatchError naming each
// option whose value differs (d's value is Want). An option present on only one
// side counts as a difference.
func (d Digest) Compare(got Digest) error {
	g := make(map[string]string, len(got.Values))
	for _, v := range got.Values {
		g[v.Name] = v.Value
	}
	var diffs []OptionDiff
	seen := make(map[string]bool, len(d.Values))
	for _, v := range d.Values {
		seen[v.Name] = true
		gv, ok := g[v.Name]
		if !ok {
			gv = "(absent)"
		}
		if gv != v.Value {
			diffs = append(diffs, OptionDiff{Option: v.Name, Want: v.Value, Got: gv})
		}
	}
	for _, v := range got.Values {
		if !seen[v.Name] {
			diffs = append(diffs, OptionDiff{Option: v.Name, Want: "(absent)", Got: v.Value})
		}
	}
	if diffs == nil {
		return nil
	}
	return &OptionMismatchError{Diffs: diffs}
}

// Without returns a copy of d without the named options, for comparisons that
// should ignore some (for example "backlog").
func (d Digest) Without(names ...string) Digest {
	out := Digest{Values: make([]OptionValue, 0, len(d.Values))}
next:
	for _, v := range d.Values {
		for _, n := range names {
			if v.Name == n {
				continue next
			}
		}
		out.Values = append(out.Values, v)
	}
	return out
}
