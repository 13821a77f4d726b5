package main

import (
	"os"
	"testing"
	"time"
)

// cpuTrack sums a live worker's CPU time from /proc and an exited one's as
// it reported it; a worker gone without a report keeps its last sample.
func TestCPUTrack(t *testing.T) {
	var tr cpuTrack
	tr.proc = "/proc"
	self := os.Getpid()
	tr.see(self)
	before := tr.total()
	for end := time.Now().Add(100 * time.Millisecond); time.Now().Before(end); { // burn CPU
	}
	after := tr.total()
	if after <= before {
		t.Fatalf("our CPU time did not grow: %d, then %d ns", before, after)
	}
	const gone = 1 << 30 // above pid_max: never a live process
	tr.see(gone)
	if got := tr.total(); got < after {
		t.Fatalf("total %d ns with an unknown pid, want at least %d", got, after)
	}
	tr.exited(gone, 7e9)
	if got := tr.total(); got < after+7e9 {
		t.Fatalf("total %d ns, want at least %d: the exit report is counted", got, after+7e9)
	}
	tr.exited(self, 1)
	if got := tr.total(); got != 7e9+1 {
		t.Fatalf("total %d ns, want %d: an exit report replaces /proc", got, int64(7e9+1))
	}
}
