package main

import (
	"os"
	"testing"
)

// TestMain lets the test binary serve as a worker, as the command does.
func TestMain(m *testing.M) {
	workerMain()
	os.Exit(m.Run())
}
