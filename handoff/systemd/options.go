package systemd

import (
	"context"
	"fmt"
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
// To know what cfg gives, CheckOptions opens and closes a reference listener
// on the loopback address of the socket's family, port 0 (UID check and
// migration policy skipped, nothing logged). TCP and UDP only; it does not take
// ownership of c.
func CheckOptions(ctx context.Context, c syscall.Conn, cfg *reuseport.Config, ignore ...string) error {
	got, err := reuseport.ReadDigest(c)
	if err != nil {
		return fmt.Errorf("systemd: check options: %w", err)
	}
	want, err := reference(ctx, got, cfg)
	if err != nil {
		return fmt.Errorf("systemd: check options: %w", err)
	}
	if err := want.Without(ignore...).Compare(got.Without(ignore...)); err != nil {
		return fmt.Errorf("systemd: check options of passed socket: %w", err)
	}
	return nil
}

// reference returns the digest of a fresh socket made with cfg, of the same
// family and type as the socket whose digest is got.
func reference(ctx context.Context, got reuseport.Digest, cfg *reuseport.Config) (reuseport.Digest, error) {
	vals := map[string]string{}
	for _, v := range got.Values {
		vals[v.Name] = v.Value
	}
	addr := map[string]string{"inet": "127.0.0.1:0", "inet6": "[::1]:0"}[vals["SO_DOMAIN"]]
	network := map[string]string{"stream": "tcp", "dgram": "udp"}[vals["SO_TYPE"]]
	if addr == "" || network == "" {
		return reuseport.Digest{}, fmt.Errorf("%w: options of a %s %s socket", reuseport.ErrNotSupported, vals["SO_DOMAIN"], vals["SO_TYPE"])
	}
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
