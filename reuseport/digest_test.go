package reuseport

import "testing"

// The digest's string is part of the handoff wire protocol: a successor
// compares it with the one its predecessor declared, so it must not change
// between versions of the library. The value below was computed by the first
// implementation (fmt.Fprintf of "name=value\n" lines into SHA-256).
func TestDigestStringStable(t *testing.T) {
	d := Digest{Values: []OptionValue{{"SO_DOMAIN", "inet"}, {"SO_TYPE", "stream"}, {"backlog", "4096"}, {"TCP_CONGESTION", "cubic"}}}
	if got, want := d.String(), "sha256:795fcb3a38f9ed34"; got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
	if (Digest{}).String() == d.String() {
		t.Error("empty digest hashes like a full one")
	}
}
