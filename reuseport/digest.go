package reuseport

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
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
// connection have equal digests. Values lists them as text, in table order;
// the accessors give the typed values.
type Digest struct {
	Values []OptionValue `json:"values"`

	family, typ, proto int
	backlog            int
	listening          bool
}

// ReadDigest reads the digest of a live inet socket (ours, one received from
// another process or from systemd). It does not take ownership of the socket.
// It is ReadSocket's Digest.
func ReadDigest(c syscall.Conn) (Digest, error) {
	s, err := ReadSocket(c)
	if err != nil {
		return Digest{}, fmt.Errorf("read digest: %w", err)
	}
	if !s.inet() {
		return Digest{}, fmt.Errorf("read digest: %w: options of a %s socket", ErrNotSupported, s.Network())
	}
	return s.Digest, nil
}

// Family is SO_DOMAIN (unix.AF_INET or AF_INET6).
func (d Digest) Family() int { return d.family }

// Type is SO_TYPE (unix.SOCK_STREAM or SOCK_DGRAM).
func (d Digest) Type() int { return d.typ }

// Protocol is SO_PROTOCOL.
func (d Digest) Protocol() int { return d.proto }

// Backlog is the effective backlog of a listening stream socket, 0 for others.
func (d Digest) Backlog() int { return d.backlog }

// Value returns the value of option name as the kernel reported it, and
// whether the digest has the option.
func (d Digest) Value(name string) (string, bool) {
	for _, v := range d.Values {
		if v.Name == name {
			return v.Value, true
		}
	}
	return "", false
}

// Map returns the options keyed by name: what package handoff sends on the wire.
func (d Digest) Map() map[string]string {
	m := make(map[string]string, len(d.Values))
	for _, v := range d.Values {
		m[v.Name] = v.Value
	}
	return m
}

// String returns a short stable hash of the digest, "sha256:" and 16 hex digits.
func (d Digest) String() string {
	sum := d.sum()
	return "sha256:" + hex.EncodeToString(sum[:8])
}

func (d Digest) sum() [sha256.Size]byte {
	b := make([]byte, 0, 512)
	for _, v := range d.Values {
		b = append(append(append(append(b, v.Name...), '='), v.Value...), '\n')
	}
	return sha256.Sum256(b)
}

// Class returns a small non-zero integer, equal for two sockets whose options
// other than the backlog are equal: the option class package steer gives its
// program.
func (d Digest) Class() uint32 {
	sum := d.Without("backlog").sum()
	v := binary.BigEndian.Uint32(sum[4:8]) // the last 8 hex digits of String
	if v == 0 {
		v = 1 // 0 never names a class
	}
	return v
}

// Compare returns nil when got equals d, or an *OptionMismatchError naming each
// option whose value differs (d's value is Want). An option present on only one
// side counts as a difference.
func (d Digest) Compare(got Digest) error {
	g := got.Map()
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

// CompareDeclared compares d with option values another process declared
// for the same socket (keyed by name, as Map gives them), on the options
// both know: an option only one side's version of this package reads is
// not a difference, so that adding an option to the table does not break a
// handoff between versions. It returns nil or an *OptionMismatchError (the
// declared value is Want).
func (d Digest) CompareDeclared(declared map[string]string) error {
	var diffs []OptionDiff
	for _, v := range d.Values {
		if w, ok := declared[v.Name]; ok && w != v.Value {
			diffs = append(diffs, OptionDiff{Option: v.Name, Want: w, Got: v.Value})
		}
	}
	if diffs == nil {
		return nil
	}
	return &OptionMismatchError{Diffs: diffs}
}

// v1Options are the options the digest of wire protocol version 1 hashed:
// the option table of the first release. LegacyString hashes only these, so
// that a peer of that release, which compares the hash, still agrees once
// the table has grown.
var v1Options = []string{
	"SO_DOMAIN", "SO_TYPE", "SO_PROTOCOL", "backlog", "SO_REUSEPORT", "SO_REUSEADDR",
	"TCP_DEFER_ACCEPT", "TCP_FASTOPEN", "TCP_SAVE_SYN", "SO_INCOMING_CPU", "SO_RCVBUF",
	"SO_SNDBUF", "TCP_NODELAY", "SO_KEEPALIVE", "TCP_KEEPIDLE", "TCP_KEEPINTVL",
	"TCP_KEEPCNT", "IPV6_V6ONLY", "IP_FREEBIND", "IP_TRANSPARENT", "SO_MARK",
	"TCP_USER_TIMEOUT", "SO_BINDTODEVICE", "TCP_CONGESTION",
}

// LegacyString is String over the options of the first release's table
// only: the "digest" of handoff's version 1 offers, which releases before
// option values went on the wire compare.
func (d Digest) LegacyString() string {
	out := Digest{Values: make([]OptionValue, 0, len(d.Values))}
	for _, v := range d.Values {
		if slices.Contains(v1Options, v.Name) {
			out.Values = append(out.Values, v)
		}
	}
	return out.String()
}

// Without returns a copy of d without the named options, for comparisons that
// should ignore some (for example "backlog").
func (d Digest) Without(names ...string) Digest {
	out := d
	out.Values = make([]OptionValue, 0, len(d.Values))
	for _, v := range d.Values {
		if !slices.Contains(names, v.Name) {
			out.Values = append(out.Values, v)
		}
	}
	return out
}
