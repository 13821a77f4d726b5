package netnstest

import (
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// FDCount returns the number of open file descriptors of this process.
func FDCount(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatalf("count fds: %v", err)
	}
	return len(ents) - 1 // the directory being read
}

// CheckLeaks records the fd count and the running goroutines now, and fails the
// test at cleanup if more fds are open or new goroutines are still running
// (both are given up to 5 s to settle). Call it first, so its cleanup runs last.
func CheckLeaks(tb testing.TB) {
	tb.Helper()
	fds := FDCount(tb)
	ignore := goleak.IgnoreCurrent()
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		n := FDCount(tb)
		for n > fds && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			n = FDCount(tb)
		}
		if n > fds {
			links := ""
			ents, _ := os.ReadDir("/proc/self/fd")
			for _, e := range ents {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				links += " " + e.Name() + "=" + l
			}
			tb.Errorf("fd leak: %d open before, %d after:%s", fds, n, links)
		}
		if err := goleak.Find(ignore); err != nil {
			tb.Errorf("goroutine leak: %v", err)
		}
	})
}
