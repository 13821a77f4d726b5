package micro

import (
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The measurement design of the accept benchmarks. An Accept's cost depends
// on where it stands as much as on the listener: on the kind accepted just
// before it (caches), on its place in the round, and on how long ago its
// connection was dialled. The old rotation ((i+j) mod n, each kind's batch
// dialled in turn, one median over all Accepts) put every kind always after
// the same other kind and dialled the last kind's connections last, and so
// scored five identical listeners up to 3.6% apart. Here every round
//
//   - gives the kinds fresh random places (a random relabelling) in a
//     Williams square, a Latin square in which every kind stands in every
//     place of a sweep, and directly after every other kind, equally often;
//   - dials the round's connections in the order they will be accepted, so
//     that every connection waits in its queue for about as long;
//   - times single Accepts, and takes each kind's mean over its fastest 90%
//     in the round (trimmed; see below);
//
// and each kind's figure is the median over rounds of its per-round ratio to
// the reference, with a bootstrap confidence interval over rounds and the
// spread (the interquartile range of the per-round ratios).
//
// Why trimmed: on a loaded 2-core machine the slowest Accepts are other
// processes' time slices, not the listener's: at load average 16 an Accept's
// median was 11 µs, its 99th percentile 142 µs and its 99.9th 2.4 ms. The
// balanced design spreads them over the kinds evenly on average, but one of
// them in a round decides that round's ratio: the per-round ratios of plain
// sums had an interquartile range of 0.18, those of the trimmed means 0.03,
// so the same precision takes about 36 times fewer rounds. A kind whose own
// cost were in its slowest tenth (a lock taken once in 20 Accepts) would be
// hidden by the trim, so the ratio of the plain totals is reported as well.

// williams returns the rows of a Williams design for n treatments: n rows
// for even n, 2n for odd n (the square and its mirror). Each row is a
// permutation of 0..n-1; every value stands in every column equally often,
// and every ordered pair (a, b), a != b, stands next to each other (b right
// after a) equally often.
func williams(n int) [][]int {
	first := make([]int, n)
	for j, lo, hi := 0, 0, n-1; j < n; j++ {
		if j%2 == 0 {
			first[j], lo = lo, lo+1
		} else {
			first[j], hi = hi, hi-1
		}
	}
	rows := make([][]int, 0, 2*n)
	for i := range n {
		r := make([]int, n)
		for j := range n {
			r[j] = (first[j] + i) % n
		}
		rows = append(rows, r)
	}
	if n%2 == 1 {
		for i := range n {
			r := slices.Clone(rows[i])
			slices.Reverse(r)
			rows = append(rows, r)
		}
	}
	return rows
}

// schedule returns one round's order of Accepts over n kinds, at least per
// of each: whole Williams designs, in random row order, with the kinds
// randomly relabelled.
func schedule(rng *rand.Rand, n, per int) []int {
	rows := williams(n)
	label := rng.Perm(n)
	var out []int
	for len(out) < n*per {
		for _, i := range rng.Perm(len(rows)) {
			for _, s := range rows[i] {
				out = append(out, label[s])
			}
		}
	}
	return out
}

// design is how many rounds to measure, how many Accepts per kind and round,
// and the seed of the random relabelling and the bootstrap.
type design struct {
	rounds, per int
	seed        uint64
}

// measure runs d over the listeners and returns each round's Accept times
// per listener, in nanoseconds: took[round][listener][i]. The timer of b, if
// any, runs only during the Accepts.
func measure(tb testing.TB, lns []net.Listener, d design) [][][]float64 {
	rng := rand.New(rand.NewPCG(d.seed, 0))
	took := make([][][]float64, d.rounds)
	addrs := make([]string, len(lns))
	for i, l := range lns {
		addrs[i] = l.Addr().String()
	}
	b, _ := tb.(*testing.B)
	for r := range took {
		order := schedule(rng, len(lns), d.per)
		conns := make([]net.Conn, 0, 2*len(order))
		for _, k := range order {
			c, err := net.Dial("tcp4", addrs[k])
			if err != nil {
				closeAll(conns)
				tb.Fatal(err)
			}
			conns = append(conns, c)
		}
		runtime.GC() // a collection between rounds, not in the middle of one
		took[r] = make([][]float64, len(lns))
		if b != nil {
			b.StartTimer()
		}
		for _, k := range order {
			t0 := time.Now()
			c, err := lns[k].Accept()
			took[r][k] = append(took[r][k], float64(time.Since(t0)))
			if err != nil {
				closeAll(conns)
				tb.Fatal(err)
			}
			conns = append(conns, c)
		}
		if b != nil {
			b.StopTimer()
		}
		closeAll(conns)
	}
	return took
}

// figure is one kind's result: its median trimmed mean time per Accept, and
// its throughput relative to the reference (the reference's time over its
// own): the median of the per-round ratios of trimmed means, a 95% bootstrap
// confidence interval of that median, the interquartile range of the
// per-round ratios, and the median of the per-round ratios of plain totals.
type figure struct {
	ns            float64
	ratio, lo, hi float64
	q1, q3        float64
	total         float64
}

// keep is the share of a kind's Accepts in a round that its trimmed mean
// keeps: the fastest 90%.
const keep = 0.9

// summarize turns measure's result into one figure per listener, relative to
// listener ref.
func summarize(took [][][]float64, ref int, seed uint64) []figure {
	n := len(took[0])
	mean := make([][]float64, len(took)) // [round][kind]: trimmed
	sum := make([][]float64, len(took))  // [round][kind]: all
	for r, t := range took {
		mean[r], sum[r] = make([]float64, n), make([]float64, n)
		for k, xs := range t {
			mean[r][k], sum[r][k] = trimmed(xs), total(xs)
		}
	}
	out := make([]figure, n)
	rng := rand.New(rand.NewPCG(seed, 1))
	for k := range n {
		ns := make([]float64, len(took))
		ratios := make([]float64, len(took))
		totals := make([]float64, len(took))
		for r := range took {
			ns[r] = mean[r][k]
			ratios[r] = mean[r][ref] / mean[r][k]
			totals[r] = sum[r][ref] / sum[r][k]
		}
		lo, hi := bootstrap(rng, ratios, 2000)
		out[k] = figure{
			ns: quantile(ns, 0.5), ratio: quantile(ratios, 0.5), lo: lo, hi: hi,
			q1: quantile(ratios, 0.25), q3: quantile(ratios, 0.75), total: quantile(totals, 0.5),
		}
	}
	return out
}

// trimmed returns the mean of the fastest keep of xs; it sorts xs.
func trimmed(xs []float64) float64 {
	slices.Sort(xs)
	m := max(1, int(float64(len(xs))*keep))
	return total(xs[:m]) / float64(m)
}

func total(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

// bootstrap returns the 2.5% and 97.5% quantiles of the medians of n
// resamples (with replacement) of xs.
func bootstrap(rng *rand.Rand, xs []float64, n int) (lo, hi float64) {
	meds := make([]float64, n)
	s := make([]float64, len(xs))
	for i := range meds {
		for j := range s {
			s[j] = xs[rng.IntN(len(xs))]
		}
		meds[i] = quantile(s, 0.5)
	}
	return quantile(meds, 0.025), quantile(meds, 0.975)
}

// quantile returns the q quantile of xs (linear between order statistics);
// it sorts xs.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

// loadavg returns the first three fields of /proc/loadavg, or why not.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return err.Error()
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
