package systemd

import (
	"context"
	"fmt"
	"github.com/zerodrop/zerodrop/internal/linux"
	"net/netip"
	"syscall"

	"github.com/zerodrop/zerodrop/reuseport"
)

// CheckOptions compares the options of a passed socket (from Take, or any
// inherited socket) with those cfg gives a new listener of the same family and
// type, via reuseport digests; options named in ignore (for example "backlog",
// or "SO_REUSEPORT" for a .socket unit without ReusePort=yes that the caller
// knowingly accepts) are left out. It returns nil when they agree, or an error
// matching reuseport.ErrOptionMismatch that unwraps to the
// *reuseport.OptionMismatchError naming each difference (Want is cfg's value).
//
// To know what cfg gives, CheckOptions opens and closes a reference socket on
// port 0 of the loopback address (IPv4) or of the IPv6 wildcard (or loopback,
// when the passed socket is bound to a specific IPv6 address, since reuseport
// makes those IPV6_V6ONLY), with the UID check and migration policy skipped
// and nothing logged. TCP and UDP only (others: reuseport.ErrNotSupported);
// it does not take ownership of c.
func CheckOptions(ctx context.Context, c syscall.Conn, cfg *reuseport.Config, ignore ...string) error {
	var s sockInfo
	if err := linux.Control(c, func(fd int) (err error) { s, err = readSock(fd); return err }); err != nil {
		return fmt.Errorf("systemd: check options: %w", err)
	}
	network, addr, err := referenceAddr(s)
	if err != nil {
		return fmt.Errorf("systemd: check options of %s: %w", s, err)
	}
	got, err := reuseport.ReadDigest(c)
	if err != nil {
		return fmt.Errorf("systemd: check options of %s: %w", s, err)
	}
	want, err := reference(ctx, network, addr, cfg)
	if err != nil {
		return fmt.Errorf("systemd: check options of %s: %w", s, err)
	}
	if err := want.Without(ignore...).Compare(got.Without(ignore...)); err != nil {
		return fmt.Errorf("systemd: check options of %s: %w", s, err)
	}
	return nil
}

// referenceAddr says where to open a reference socket like s: "tcp" or "udp"
// (so reuseport leaves IPV6_V6ONLY to Options.V6Only) and an address of the
// same family and kind (wildcard or specific), port 0.
func referenceAddr(s sockInfo) (network, addr string, err error) {
	switch network = s.network(); network {
	case "tcp4", "udp4":
		return network[:3], "127.0.0.1:0", nil
	case "tcp6", "udp6":
		if ap, err := netip.ParseAddrPort(s.address()); err == nil && !ap.Addr().IsUnspecified() {
			return network[:3], "[::1]:0", nil
		}
		return network[:3], "[::]:0", nil
	}
	return "", "", fmt.Errorf("%w: options of a %s socket", reuseport.ErrNotSupported, network)
}

// reference returns the digest of a fresh socket made with cfg.
func reference(ctx context.Context, network, addr string, cfg *reuseport.Config) (reuseport.Digest, error) {
	ref := reuseport.Config{}
	if cfg != nil {
		ref = *cfg
	}
	ref.SkipUIDCheck, ref.Migration, ref.Logger = true, reuseport.MigrationIgnore, nil
	if network == "udp" {
		pc, err := ref.ListenPacket(ctx, network, addr)
		if err != nil {
			return reuseport.Digest{}, fmt.Errorf("reference socket: %w", err)
		}
		defer pc.Close()
		return pc.Digest(), nil
	}
	l, err := ref.Listen(ctx, network, addr)
	if err != nil {
		return reuseport.Digest{}, fmt.Errorf("reference socket: %w", err)
	}
	defer l.Close()
	return l.Digest(), nil
}
