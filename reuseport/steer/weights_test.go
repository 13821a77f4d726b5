package steer_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// chiSquare001 is the chi-square critical value for 1 degree of freedom at
// p = 0.001.
const chiSquare001 = 10.828

// With weights 90/10/0 over 10,000 new connections, the split between the
// first two passes a chi-square test at p = 0.001 and the third gets none;
// the program's counters agree with what each listener accepted.
func TestWeights(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const total = 10000
		cfg := &steer.Config{Dir: bpffs(t)}
		ms := group(t, cfg, reuseport.Options{}, reuseport.Options{}, reuseport.Options{})
		for i, w := range []uint32{90, 10, 0} {
			if err := ms[i].m.SetWeight(w); err != nil {
				t.Fatal(err)
			}
		}
		var accepted [3]atomic.Int64
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					c, err := m.l.Accept()
					if err != nil {
						return
					}
					accepted[i].Add(1)
					c.Close()
				}
			}()
		}
		dial(t, ms[0].l.Addr().String(), total)
		deadline := time.Now().Add(10 * time.Second)
		for accepted[0].Load()+accepted[1].Load()+accepted[2].Load() < total && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for _, m := range ms {
			m.l.Close()
		}
		wg.Wait()
		n := [3]int64{accepted[0].Load(), accepted[1].Load(), accepted[2].Load()}
		if n[0]+n[1]+n[2] != total || n[2] != 0 {
			t.Fatalf("accepted %v, want %d in all and none at weight 0", n, total)
		}
		chi := sq(float64(n[0])-0.9*total)/(0.9*total) + sq(float64(n[1])-0.1*total)/(0.1*total)
		t.Logf("90/10/0 over %d: %v, chi-square %.2f (critical %.3f)", total, n, chi, chiSquare001)
		if chi > chiSquare001 {
			t.Fatalf("split %v fails the chi-square test: %.2f > %.3f", n, chi, chiSquare001)
		}
		for i, m := range ms {
			if c := counters(t, m.m); c.Steered != uint64(n[i]) {
				t.Fatalf("slot %d counted %d steered, accepted %d", i, c.Steered, n[i])
			}
		}
	})
}

func sq(x float64) float64 { return x * x }

// dial opens and closes n connections to addr from 4 goroutines.
func dial(t *testing.T, addr string, n int) {
	t.Helper()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	if f := failed.Load(); f != 0 {
		t.Fatalf("%d of %d dials failed", f, n)
	}
}
