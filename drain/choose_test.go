package drain

import (
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/shared"
)

// TestChooseNeverShutsDownUnsure: whatever the group looks like, a holder
// scan that cannot prove we are the last holder, or a socket known to be
// shared, never yields a method that shuts the socket down.
func TestChooseNeverShutsDownUnsure(t *testing.T) {
	groups := []Report{{}, {Siblings: 2, Migration: true}, {Siblings: 1}, {Migration: true}}
	for _, g := range groups {
		for _, sh := range []string{"", shared.Successor, shared.Predecessor, shared.Systemd, sharedByOption} {
			for _, unsure := range []string{"", "the holder scan could not read the fds of 1 processes started after us (pids [7])"} {
				r := g
				r.Shared = sh
				m, why := choose(&r, unsure)
				known := sh != "" && sh != shared.Predecessor
				if (unsure != "" || known) && m != MethodRelease {
					t.Errorf("group %+v shared %q unsure %q: method %s (%s), want release", g, sh, unsure, m, why)
				}
				if unsure != "" && sh == "" && !strings.Contains(why, unsure) {
					t.Errorf("shared %q unsure %q: why %q does not say why", sh, unsure, why)
				}
				if unsure == "" && !known && m == MethodRelease {
					t.Errorf("group %+v shared %q, complete scan, no holder: release, want a shutdown method", g, sh)
				}
			}
		}
	}
}
