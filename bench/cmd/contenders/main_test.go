package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a worker and as a run child, as the
// command does.
func TestMain(m *testing.M) {
	workerMain()
	runChildMain()
	os.Exit(m.Run())
}
