package netnstest

import (
	"os"
	"testing"
)

// EnvRequirePrivileged names the variable that, set to 1, turns every
// privilege skip into a failure.
const EnvRequirePrivileged = "ZERODROP_REQUIRE_PRIVILEGED"

// RequirePrivileged skips the test unless the process is root, or fails it when
// ZERODROP_REQUIRE_PRIVILEGED=1.
func RequirePrivileged(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() == 0 {
		return
	}
	const why = "needs root: creates network namespaces (CAP_SYS_ADMIN) and sets net.ipv4 sysctls (CAP_NET_ADMIN)"
	if os.Getenv(EnvRequirePrivileged) == "1" {
		tb.Fatalf("%s, and %s=1 forbids skipping", why, EnvRequirePrivileged)
	}
	tb.Skip(why)
}
