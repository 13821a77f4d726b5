package netnstest

import (
	"errors"
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

// SkipUnless skips the test for why, or fails it when
// ZERODROP_REQUIRE_PRIVILEGED=1, unless ok: for what a test needs of the
// machine beyond root (a kernel feature, a second CPU), which CI's machine
// has. Give a precise why; a test that cannot tell why it cannot run fails.
func SkipUnless(tb testing.TB, ok bool, why string) {
	tb.Helper()
	if ok {
		return
	}
	if os.Getenv(EnvRequirePrivileged) == "1" {
		tb.Fatalf("%s, and %s=1 forbids skipping", why, EnvRequirePrivileged)
		return
	}
	tb.Skip(why)
}

// RequireSupport returns when err is nil, skips the test (as SkipUnless does:
// a failure when ZERODROP_REQUIRE_PRIVILEGED=1) when err matches
// notSupported, the package's sentinel for a kernel that lacks the feature,
// and fails it on any other error: an error that does not say "not
// supported" is a failure, never a reason to skip.
func RequireSupport(tb testing.TB, err, notSupported error) {
	tb.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, notSupported) {
		tb.Fatalf("cannot tell whether the kernel supports what this test needs: %v", err)
		return
	}
	SkipUnless(tb, false, "kernel: "+err.Error())
}
