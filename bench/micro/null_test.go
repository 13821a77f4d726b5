package micro

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestAcceptNull checks the design itself: five identical plain-TCP
// net.Listen listeners, measured as BenchmarkAcceptKinds measures the kinds,
// must each read 1.00 +- 0.01 of the first. It samples in chunks of rounds
// until every 95% confidence interval is at most 0.01 wide (at least 200
// rounds, at most 3000 or 3 minutes), in a network namespace of its own.
// The old design (each kind's batch dialled in turn, the (i+j) mod n
// rotation, per-round totals) failed it, its copies reading 1.047-1.059 at
// load average 16-25; with trimmed means a heavy load can wash out the old
// order's bias, and TestSchedule is the check that always fails on it.
func TestAcceptNull(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		lns := open(t, identical(5)) // closed by its cleanups, before CheckLeaks's
		const chunk, maxRounds, width = 100, 3000, 0.01
		deadline := time.Now().Add(3 * time.Minute)
		var took [][][]float64
		var figs []figure
		for seed := uint64(1); ; seed++ {
			took = append(took, measure(t, lns, design{rounds: chunk, per: perRound, seed: seed})...)
			figs = summarize(took, 0, seed)
			if len(took) >= 2*chunk && widest(figs) <= width || len(took) >= maxRounds || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("%d rounds x %d Accepts per kind, load average %s; widest 95%% CI %.4f", len(took), perRound, loadavg(), widest(figs))
		for i, f := range figs[1:] {
			line := fmt.Sprintf("A%d/A0 %.4f [%.4f, %.4f], IQR [%.4f, %.4f], ratio of totals %.4f", i+1, f.ratio, f.lo, f.hi, f.q1, f.q3, f.total)
			if math.Abs(f.ratio-1) > 0.01 {
				t.Errorf("%s: an identical listener reads more than 0.01 away from 1", line)
			} else {
				t.Log(line)
			}
		}
	})
}

// widest returns the width of the widest confidence interval.
func widest(figs []figure) float64 {
	w := 0.0
	for _, f := range figs {
		w = max(w, f.hi-f.lo)
	}
	return w
}

// TestWilliams checks the balance the design relies on, for 2 to 9 kinds:
// each row a permutation, each kind in each place equally often, each kind
// directly after each other kind equally often.
func TestWilliams(t *testing.T) {
	for n := 2; n <= 9; n++ {
		rows := williams(n)
		if want := n + n%2*n; len(rows) != want {
			t.Errorf("n=%d: %d rows, want %d", n, len(rows), want)
		}
		place := make([][]int, n) // place[kind][column]
		after := make([][]int, n) // after[a][b]: b right after a
		for k := range n {
			place[k], after[k] = make([]int, n), make([]int, n)
		}
		for _, r := range rows {
			if s := slices.Sorted(slices.Values(r)); !slices.Equal(s, perm(n)) {
				t.Fatalf("n=%d: row %v is not a permutation", n, r)
			}
			for j, k := range r {
				place[k][j]++
				if j > 0 {
					after[r[j-1]][k]++
				}
			}
		}
		for a := range n {
			for j := range n {
				if place[a][j] != place[0][0] {
					t.Errorf("n=%d: kind %d stands %d times in place %d, kind 0 %d times in place 0", n, a, place[a][j], j, place[0][0])
				}
			}
			for b := range n {
				if a != b && after[a][b] != after[0][1] {
					t.Errorf("n=%d: %d right after %d %d times, 1 after 0 %d times", n, b, a, after[a][b], after[0][1])
				}
			}
		}
	}
}

// TestSchedule checks one round's order: the same number of Accepts of
// every kind, at least perRound; over 200 rounds every kind comes first in
// some round, and every kind stands directly after every other kind at least
// half as often as the average pair (the junctions between Williams rows are
// random, so not exactly as often).
func TestSchedule(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{5, 6, 7} {
		first := make([]int, n)
		after := make([][]int, n) // after[a][b]: b right after a
		for k := range n {
			after[k] = make([]int, n)
		}
		for range 200 {
			order := schedule(rng, n, perRound)
			count := make([]int, n)
			for i, k := range order {
				count[k]++
				if i > 0 {
					after[order[i-1]][k]++
				}
			}
			for k, c := range count {
				if c != count[0] || c < perRound {
					t.Fatalf("n=%d: kind %d has %d Accepts in a round, kind 0 %d, want the same, at least %d", n, k, c, count[0], perRound)
				}
			}
			first[order[0]]++
		}
		if slices.Contains(first, 0) {
			t.Errorf("n=%d: first place over 200 rounds %v: some kind never came first", n, first)
		}
		pairs, all := 0, 0
		for a := range n {
			for b := range n {
				if a != b {
					pairs++
					all += after[a][b]
				}
			}
		}
		for a := range n {
			for b := range n {
				if a != b && 2*after[a][b]*pairs < all {
					t.Errorf("n=%d: %d right after %d %d times over 200 rounds, the average pair %d", n, b, a, after[a][b], all/pairs)
				}
			}
		}
	}
}

// TestQuantile pins the quantile and bootstrap arithmetic on small inputs.
func TestQuantile(t *testing.T) {
	if got := quantile([]float64{4, 1, 3, 2}, 0.5); got != 2.5 {
		t.Errorf("median of 1..4 = %v, want 2.5", got)
	}
	if got := quantile([]float64{4, 1, 3, 2, 5}, 0.25); got != 2 {
		t.Errorf("first quartile of 1..5 = %v, want 2", got)
	}
	xs := make([]float64, 101)
	for i := range xs {
		xs[i] = float64(i)
	}
	lo, hi := bootstrap(rand.New(rand.NewPCG(1, 1)), xs, 2000)
	if !(lo < 50 && 50 < hi && hi-lo < 40) {
		t.Errorf("bootstrap CI of the median of 0..100 = [%v, %v], want around 50 and narrower than 40", lo, hi)
	}
}

func perm(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}
