package quicdrain

import (
	"os"
	"runtime"
	"testing"
	"time"
)

// noLeaks runs body, then fails the test if more goroutines run than
// before it (once they had 10 s to end) or another number of fds is open.
func noLeaks(t *testing.T, body func()) {
	t.Helper()
	goroutines, fds := runtime.NumGoroutine(), fdCount()
	body()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > goroutines {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines, %d before:\n%s", g, goroutines, buf[:runtime.Stack(buf, true)])
	}
	if f := fdCount(); f != fds {
		t.Errorf("%d fds open, %d before", f, fds)
	}
}

func fdCount() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// heapBound notes the heap in use (after a GC); the func it returns fails
// the test if the heap grew by more than 32 MiB since.
func heapBound(t *testing.T) (check func()) {
	var m0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	return func() {
		t.Helper()
		var m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m1)
		if grew := int64(m1.HeapInuse) - int64(m0.HeapInuse); grew > 32<<20 {
			t.Errorf("heap grew by %d MiB", grew>>20)
		}
	}
}

// shortPacket is a short header packet to the connection ID id, with n
// bytes of payload.
func shortPacket(id []byte, n int) []byte {
	return append(append([]byte{0x40}, id...), make([]byte, n)...)
}
