package reuseport

import (
	"go.uber.org/zap"
)

// Config says how to create reuseport sockets. The zero value means: plain TCP
// (IPPROTO_TCP, not MPTCP), kernel-default options, warn-free migration check
// (MigrationWarn with no logger), and no logging.
type Config struct {
	// Options are set on every socket before bind and read back after.
	Options Options
	// Migration is the policy for net.ipv4.tcp_migrate_req, checked by Listen
	// for TCP. The default, MigrationWarn, logs one warning when it is off.
	Migration MigrationPolicy
	// MPTCP creates IPPROTO_MPTCP listeners instead of IPPROTO_TCP, knowingly:
	// on this kernel, a closing MPTCP listener fast-closes every queued
	// MPTCP-capable connection while TCPMigrateReqSuccess still counts it, and
	// reuseport eBPF programs are refused (EOPNOTSUPP). See KERNEL.md.
	MPTCP bool
	// SkipUIDCheck skips the sock_diag look-up of the group's owners before bind.
	SkipUIDCheck bool
	// Logger receives setup warnings and option adjustments; nil means no
	// logging. Nothing is ever logged on the accept path.
	Logger *zap.Logger
}

func (c *Config) logger() *zap.Logger {
	if c == nil || c.Logger == nil {
		return zap.NewNop()
	}
	return c.Logger
}
