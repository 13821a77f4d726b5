package load

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts, Run's included, must be gone when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
