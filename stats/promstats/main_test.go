package promstats_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if a goroutine outlives them (the
// namespace tests check their own fds and goroutines through netnstest).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
