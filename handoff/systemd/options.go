package systemd

import (
	"context"
	"fmt"
	"syscall"

	"github.com/zerodrop/zerodrop/reuseport"
)

// CheckOptions compares the options of a passed socket (from Take, or any
// inherited socket) with those cfg gives a new listener of the same family and
// type: reuseport's one option check (Config.Check, whose doc gives the
// rule: every option equal, and the backlog what cfg asks clamped to
// net.core.somaxconn). Options named in ignore (for example "backlog", or
// "SO_REUSEPORT" for a .socket unit without ReusePort=yes that the caller
// knowingly accepts) are left out. It returns nil when they agree, or an error
// matching reuseport.ErrOptionMismatch that unwraps to the
// *reuseport.OptionMismatchError naming each difference (Want is cfg's
// value). IPV6_V6ONLY is compared with cfg's Options.V6Only. TCP and UDP only
// (others: reuseport.ErrNotSupported); it does not take ownership of c. A nil
// cfg is the zero Config.
func CheckOptions(ctx context.Context, c syscall.Conn, cfg *reuseport.Config, ignore ...string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("systemd: check options: %w", err)
	}
	s, err := reuseport.ReadSocket(c)
	if err != nil {
		return fmt.Errorf("systemd: check options: %w", err)
	}
	if cfg == nil {
		cfg = &reuseport.Config{}
	}
	network := s.Network()
	if len(network) == 4 && (network[:3] == "tcp" || network[:3] == "udp") {
		network = network[:3] // V6Only as cfg says, not forced as for tcp6
	}
	if err := cfg.Check(network, s, ignore...); err != nil {
		return fmt.Errorf("systemd: check options of %s: %w", s, err)
	}
	return nil
}
