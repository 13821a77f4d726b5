package drain_test

import (
	"errors"
	"net"
	"testing"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
)

// TestNotSupportedSentinel: drain, reuseport and the standard library share
// one "not supported" sentinel, so one errors.Is test covers every package:
// Wrap's refusal of a unix listener matches all three names.
func TestNotSupportedSentinel(t *testing.T) {
	if !errors.Is(drain.ErrNotSupported, errors.ErrUnsupported) || !errors.Is(reuseport.ErrNotSupported, errors.ErrUnsupported) {
		t.Fatalf("drain.ErrNotSupported (%v) and reuseport.ErrNotSupported (%v) must both be errors.ErrUnsupported", drain.ErrNotSupported, reuseport.ErrNotSupported)
	}
	ul, err := net.Listen("unix", t.TempDir()+"/s")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	_, err = drain.Wrap(ul, drain.Options{})
	for _, target := range []error{drain.ErrNotSupported, reuseport.ErrNotSupported, errors.ErrUnsupported} {
		if !errors.Is(err, target) {
			t.Errorf("Wrap(unix listener): %v, want an error matching %q", err, target)
		}
	}
}
