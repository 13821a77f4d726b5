package netnstest

import (
	"errors"
	"fmt"
	"testing"
)

// verdict records what a helper asked of its test instead of ending it.
type verdict struct {
	testing.TB
	failed, skipped string
}

func (v *verdict) Helper()                           {}
func (v *verdict) Fatalf(format string, args ...any) { v.failed = fmt.Sprintf(format, args...) }
func (v *verdict) Skip(args ...any)                  { v.skipped = fmt.Sprint(args...) }

// RequireSupport skips only for the package's "not supported" sentinel, and
// not even then under ZERODROP_REQUIRE_PRIVILEGED=1; any other error fails.
func TestRequireSupport(t *testing.T) {
	errNotSupported := errors.New("not supported")
	old := fmt.Errorf("%w: since Linux 6.1 (this is 5.15)", errNotSupported)
	other := errors.New("uname: operation not permitted")
	for _, tc := range []struct {
		err             error
		require         string
		failed, skipped bool
	}{
		{nil, "", false, false},
		{nil, "1", false, false},
		{old, "", false, true},
		{old, "1", true, false},
		{other, "", true, false},
		{other, "1", true, false},
	} {
		t.Setenv(EnvRequirePrivileged, tc.require)
		v := &verdict{TB: t}
		RequireSupport(v, tc.err, errNotSupported)
		if (v.failed != "") != tc.failed || (v.skipped != "") != tc.skipped {
			t.Errorf("err %v, %s=%q: failed %q, skipped %q; want failed %v, skipped %v", tc.err, EnvRequirePrivileged, tc.require, v.failed, v.skipped, tc.failed, tc.skipped)
		}
	}
	t.Setenv(EnvRequirePrivileged, "")
	v := &verdict{TB: t}
	SkipUnless(v, false, "one online CPU")
	if v.skipped != "one online CPU" || v.failed != "" {
		t.Errorf("SkipUnless(false): failed %q, skipped %q; want skipped with the reason", v.failed, v.skipped)
	}
}
