package drain

import (
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/shared"
)

// TestChooseNeverShutsDownUnsure: whatever the group looks like, a holder
// scan that cannot prove we are the last holder, or a socket known to be
// shared, never yields a method that shuts the socket down. A socket received
// from a predecessor, or from systemd, is shut down only after a scan that
// read every process, old or young, in our tree or not: an unreadable
// predecessor (not dumpable, another UID) can never prove it let go. And one
// that such a scan shows nobody else holds is shut down: a socket an
// activator passed and then left (systemd-socket-activate executes the
// service) was released before, its queue reset at our close; the Systemd
// cases with a complete scan failed before.
func TestChooseNeverShutsDownUnsure(t *testing.T) {
	groups := []Report{{}, {Siblings: 2, Migration: true}, {Siblings: 1}, {Migration: true}}
	const unsure = "the holder scan could not read the fds of 1 processes started after us (pids [7])"
	const blind = "the holder scan could not read the fds of 1 processes (pids [3])"
	scans := []scan{{}, {unsure: unsure, blind: unsure}, {blind: blind}}
	for _, g := range groups {
		for _, sh := range []string{"", shared.Successor, shared.Predecessor, shared.Systemd, sharedByOption} {
			for _, sc := range scans {
				r := g
				r.Shared = sh
				m, why := choose(&r, sc)
				claimed := sh == shared.Predecessor || sh == shared.Systemd // verifiable by the scan
				known := sh != "" && !claimed
				mayHold := sc.unsure != "" || (claimed && sc.blind != "")
				if (mayHold || known) && m != MethodRelease {
					t.Errorf("group %+v shared %q scan %+v: method %s (%s), want release", g, sh, sc, m, why)
				}
				if sc.unsure != "" && sh == "" && !strings.Contains(why, sc.unsure) {
					t.Errorf("shared %q scan %+v: why %q does not say why", sh, sc, why)
				}
				if claimed && sc.blind != "" && !strings.Contains(why, sc.blind) {
					t.Errorf("shared %q scan %+v: why %q does not say what the scan could not read", sh, sc, why)
				}
				if !mayHold && !known && m == MethodRelease {
					t.Errorf("group %+v shared %q, scan %+v, no holder: release, want a shutdown method", g, sh, sc)
				}
				if want := mayHold && !known; (sc.careful(&r) != "") != want {
					t.Errorf("shared %q scan %+v: careful %q, want accept-then-release %v", sh, sc, sc.careful(&r), want)
				}
			}
		}
	}
}
