package steer_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// askN makes n sequential requests and returns the answers by worker name;
// it fails the test on any unanswered request.
func askN(t *testing.T, addr string, n int) map[string]int {
	t.Helper()
	by := map[string]int{}
	for range n {
		name, o := ask(addr, 5*time.Second)
		if o != netnstest.Answered {
			t.Fatalf("request %d: %v", len(by), o)
		}
		by[name]++
	}
	return by
}

func steered(t *testing.T, g *steer.Group) []uint64 {
	t.Helper()
	slots, err := g.Slots()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]uint64, len(slots))
	for i, s := range slots {
		out[i] = s.Counters.Steered
	}
	return out
}

func slotIndex(t *testing.T, w *worker) int {
	t.Helper()
	i, err := strconv.Atoi(w.slot)
	if err != nil {
		t.Fatalf("worker %s slot %q", w.name, w.slot)
	}
	return i
}

// Three worker processes share one pinned program; one is SIGKILLed: its slot
// stops receiving at once, every request is still answered, Prune frees the
// slot and a new worker takes it.
func TestWorkerKilled(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		dir := netnstest.MountBPF(t, "0755")
		cfg := &steer.Config{Dir: dir}
		w1 := startWorker(t, "w1", "steer", dir, "127.0.0.1:0")
		w2 := startWorker(t, "w2", "steer", dir, w1.addr)
		w3 := startWorker(t, "w3", "steer", dir, w1.addr)
		g := open(t, cfg, w1.addr)
		slots, err := g.Slots()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []*worker{w1, w2, w3} {
			if s := slots[slotIndex(t, w)]; s.State != steer.Live || s.Cookie == 0 {
				t.Fatalf("worker %s slot %+v, want live with a socket", w.name, s)
			}
		}
		if by := askN(t, w1.addr, 150); by["w1"] == 0 || by["w2"] == 0 || by["w3"] == 0 {
			t.Fatalf("answers %v, want all three workers", by)
		}
		k := slotIndex(t, w2)
		if err := w2.p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w2.p.Wait(ctx)
		before := steered(t, g)
		if by := askN(t, w1.addr, 150); by["w2"] != 0 || by["w1"]+by["w3"] != 150 {
			t.Fatalf("answers after the kill %v, want none from w2", by)
		}
		after := steered(t, g)
		if after[k] != before[k] {
			t.Fatalf("killed worker's slot steered %d more", after[k]-before[k])
		}
		if err := g.Prune(ctx); err != nil {
			t.Fatal(err)
		}
		if s, _ := g.Slots(); s[k].State != steer.Free {
			t.Fatalf("killed worker's slot %+v after Prune, want free", s[k])
		}
		before = steered(t, g)
		askN(t, w1.addr, 150)
		after = steered(t, g)
		if got := after[slotIndex(t, w1)] - before[slotIndex(t, w1)] + after[slotIndex(t, w3)] - before[slotIndex(t, w3)]; got != 150 {
			t.Fatalf("live slots steered %d of 150 after Prune", got)
		}
		w4 := startWorker(t, "w4", "steer", dir, w1.addr)
		if slotIndex(t, w4) != k {
			t.Fatalf("new worker took slot %s, want the freed %d", w4.slot, k)
		}
		if by := askN(t, w1.addr, 150); by["w4"] == 0 {
			t.Fatalf("answers %v, want some from the new worker", by)
		}
	})
}

// load runs closed-loop clients against addr until stop is closed and tallies
// the outcomes.
func load(addr string, clients int, stop <-chan struct{}) func() netnstest.Tally {
	var mu sync.Mutex
	tally := netnstest.Tally{}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, o := ask(addr, 5*time.Second)
				mu.Lock()
				tally[o]++
				mu.Unlock()
			}
		}()
	}
	return func() netnstest.Tally {
		wg.Wait()
		return tally
	}
}

// drains runs n drains alternating between the workers under load and returns
// the tally and each drain's duration in ms.
func drains(t *testing.T, ws []*worker, n int) (netnstest.Tally, []int) {
	t.Helper()
	stop := make(chan struct{})
	wait := load(ws[0].addr, 16, stop)
	var ms []int
	defer func() {
		if stop != nil {
			close(stop)
			wait()
		}
	}()
	time.Sleep(100 * time.Millisecond)
	for i := range n {
		line := ws[i%len(ws)].do(t, "drain")
		var d int
		var slot string
		if _, err := fmt.Sscanf(line, "drained %d %s", &d, &slot); err != nil {
			t.Fatalf("drain %d: %q", i, line)
		}
		ms = append(ms, d)
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	stop = nil
	return wait(), ms
}

func distribution(ms []int) string {
	s := slices.Clone(ms)
	slices.Sort(s)
	q := func(p float64) int { return s[int(p*float64(len(s)-1))] }
	return fmt.Sprintf("min %d, median %d, p90 %d, max %d ms", s[0], q(0.5), q(0.9), s[len(s)-1])
}

// With tcp_migrate_req=0, two worker processes drained 20 times under load
// with steering lose nothing; the same drains as plain closes, in the same
// run, lose some.
func TestLosslessDrain(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const n = 20
		dir := netnstest.MountBPF(t, "0755")
		s1 := startWorker(t, "s1", "steer", dir, "127.0.0.1:0")
		s2 := startWorker(t, "s2", "steer", dir, s1.addr)
		steerTally, steerMs := drains(t, []*worker{s1, s2}, n)
		p1 := startWorker(t, "p1", "plain", dir, "127.0.0.1:0")
		p2 := startWorker(t, "p2", "plain", dir, p1.addr)
		plainTally, plainMs := drains(t, []*worker{p1, p2}, n)
		t.Logf("steered drains: %v; %s", steerTally, distribution(steerMs))
		t.Logf("plain closes:   %v; %s", plainTally, distribution(plainMs))
		if lost := total(steerTally) - steerTally[netnstest.Answered]; lost != 0 || steerTally[netnstest.Answered] == 0 {
			t.Fatalf("steered drains lost %d: %v", lost, steerTally)
		}
		if slices.Max(steerMs) > 2000 {
			t.Fatalf("a drain took %d ms, want under 2 s", slices.Max(steerMs))
		}
		if lost := total(plainTally) - plainTally[netnstest.Answered]; lost == 0 {
			t.Fatalf("plain closes lost nothing (%v): the load is too light to show the difference", plainTally)
		}
	})
}

func total(t netnstest.Tally) int {
	n := 0
	for _, v := range t {
		n += v
	}
	return n
}
