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
		cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755")}
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

// Under BalanceLeastLoaded new connections go to the live slot with a weight
// and the lowest reported load; back under BalanceWeighted, loads no longer
// matter.
func TestLeastLoaded(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755"), Balance: steer.BalanceLeastLoaded}
		var ms []member
		addr := "127.0.0.1:0"
		for _, s := range []struct{ weight, load uint32 }{{100, 5}, {100, 1}, {0, 0}} {
			l := listen(t, addr, reuseport.Options{})
			addr = l.Addr().String()
			m := join(t, cfg, l)
			if err := m.SetWeight(s.weight); err != nil {
				t.Fatal(err)
			}
			if err := m.SetLoad(s.load); err != nil {
				t.Fatal(err)
			}
			ms = append(ms, member{l, m})
		}
		expect := func(want ...int) {
			t.Helper()
			for i, m := range ms {
				if q := queued(t, m.l); q != want[i] {
					t.Fatalf("slot %d has %d queued, want %v", i, q, want)
				}
			}
		}
		dial(t, addr, 100)
		expect(0, 100, 0)
		if err := ms[1].m.SetLoad(9); err != nil {
			t.Fatal(err)
		}
		dial(t, addr, 50)
		expect(50, 100, 0)
		if err := ms[0].m.Group().SetBalance(steer.BalanceWeighted); err != nil {
			t.Fatal(err)
		}
		dial(t, addr, 200)
		if a, b := queued(t, ms[0].l)-50, queued(t, ms[1].l)-100; a == 0 || b == 0 || a+b != 200 || queued(t, ms[2].l) != 0 {
			t.Fatalf("weighted after least-loaded: %d and %d of 200, want both", a, b)
		}
		if c := counters(t, ms[1].m); c.Steered != uint64(queued(t, ms[1].l)) {
			t.Fatalf("slot 1 counted %d, has %d queued", c.Steered, queued(t, ms[1].l))
		}
	})
}
