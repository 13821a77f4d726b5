package reuseport

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/zerodrop/zerodrop/internal/linux"
	"go.uber.org/zap"
)

// MigrationPolicy says what Listen does about net.ipv4.tcp_migrate_req, which
// decides whether a closing member's accept queue moves to a sibling (1) or is
// reset (0, the kernel default). The sysctl is per network namespace.
type MigrationPolicy int

// The policies.
const (
	// MigrationWarn logs one warning per Listen when the sysctl is off.
	MigrationWarn MigrationPolicy = iota
	// MigrationRequire fails Listen with ErrMigrationDisabled when it is off.
	MigrationRequire
	// MigrationEnable writes 1 (needs CAP_NET_ADMIN over the namespace).
	MigrationEnable
	// MigrationIgnore does not look.
	MigrationIgnore
)

const enableCmd = "sysctl -w net.ipv4.tcp_migrate_req=1"

// MigrationEnabled reports net.ipv4.tcp_migrate_req of the calling thread's
// network namespace. On kernels without it (before 5.14) the error matches
// ErrNotSupported.
func MigrationEnabled() (bool, error) {
	v, err := linux.ReadSysctl(linux.MigrateReq)
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("%w: this kernel has no %s (Linux 5.14+)", ErrNotSupported, linux.MigrateReq)
	}
	if err != nil {
		return false, err
	}
	return v != "0", nil
}

// checkMigration applies the policy.
func checkMigration(p MigrationPolicy, log *zap.Logger) error {
	if p == MigrationIgnore {
		return nil
	}
	on, err := MigrationEnabled()
	switch {
	case err != nil && p == MigrationWarn:
		log.Warn("cannot read net.ipv4.tcp_migrate_req: a closing member may reset its accept queue", zap.Error(err))
		return nil
	case err != nil:
		return fmt.Errorf("%w: %w", ErrMigrationDisabled, err)
	case on:
		return nil
	}
	switch p {
	case MigrationRequire:
		return fmt.Errorf("%w in this network namespace: a closing member would reset its accept queue; run: %s", ErrMigrationDisabled, enableCmd)
	case MigrationEnable:
		if err := linux.WriteSysctl(linux.MigrateReq, "1"); err != nil {
			if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
				return fmt.Errorf("%w: enabling it needs CAP_NET_ADMIN in this network namespace (or run %s as root): %w", ErrMigrationDisabled, enableCmd, err)
			}
			return fmt.Errorf("%w: %w", ErrMigrationDisabled, err)
		}
		return nil
	}
	log.Warn("net.ipv4.tcp_migrate_req is 0: a closing member resets its accept queue and no TcpExt counter shows it",
		zap.String("fix", enableCmd))
	return nil
}
