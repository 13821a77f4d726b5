package load

import (
	"sync"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// maxLatency is the highest latency the histograms track; longer ones are
// recorded as this.
const maxLatency = 10 * time.Minute

// recorder keeps the timeline of a run. Requests are attributed to the bucket
// they were sent in: begin opens one, done closes it. Buckets still live can
// change; a bucket is sealed (summarised, its histogram merged and recycled)
// once no request sent in it is in flight and no later mark can be near it.
type recorder struct {
	mu     sync.Mutex
	bucket time.Duration
	window time.Duration
	clock  func() time.Duration // time since the run's start; valid once started

	started, stopped  bool
	base              int    // index of live[0]
	live              []*acc // buckets base, base+1, ...
	free              []*hdr.Histogram
	marks             []time.Duration // parallel to res.Marks
	all, steady, near *hdr.Histogram
	res               Result
}

// acc accumulates one live bucket.
type acc struct {
	b        Bucket
	h        *hdr.Histogram // nil until the bucket's first ok request
	inflight int
}

func newRecorder(bucket, window time.Duration) *recorder {
	r := &recorder{bucket: bucket, window: window}
	r.all, r.steady, r.near = r.hist(), r.hist(), r.hist()
	r.res.FailedByClass = make(map[Class]int64)
	for _, c := range failures {
		r.res.FailedByClass[c] = 0
	}
	r.res.Marks, r.res.Buckets = []Event{}, []Bucket{}
	return r
}

func (r *recorder) hist() *hdr.Histogram {
	if n := len(r.free); n > 0 {
		h := r.free[n-1]
		r.free = r.free[:n-1]
		return h
	}
	return hdr.New(1, maxLatency.Microseconds(), 3)
}

// start starts the timeline; clock must return the time since start.
func (r *recorder) start(start time.Time, clock func() time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Start, r.clock, r.started = start, clock, true
}

// mark records an event now. Before the start it counts as at 0; after the
// end it is ignored.
func (r *recorder) mark(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var at time.Duration
	switch {
	case r.stopped:
		return
	case r.started:
		at = r.clock()
	}
	r.marks = append(r.marks, at)
	r.res.Marks = append(r.res.Marks, Event{Name: name, AtMS: ms(at)})
}

// count returns the requests recorded so far, and the failed ones.
func (r *recorder) count() (requests, failed int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res.Requests, r.res.Failed
}

// begin opens a request sent at offset at and returns its bucket index. A
// request sent in an already sealed bucket (an open-loop scheduler running
// very late) goes to the oldest live one.
func (r *recorder) begin(at time.Duration) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := max(int(at/r.bucket), r.base)
	r.grow(i)
	r.live[i-r.base].inflight++
	return i
}

// abort closes a request begun in bucket i without recording it.
func (r *recorder) abort(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live[i-r.base].inflight--
	r.seal(r.clock(), false)
}

// done closes a request begun in bucket i: its latency and class, and the
// value of the captured header.
func (r *recorder) done(i int, lat time.Duration, c Class, hv string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.live[i-r.base]
	a.inflight--
	a.b.Requests++
	r.res.Requests++
	if c == OK {
		if a.h == nil {
			a.h = r.hist()
		}
		a.h.RecordValue(min(lat, maxLatency).Microseconds())
		if hv != "" {
			a.b.Headers = inc(a.b.Headers, hv)
			r.res.Headers = inc(r.res.Headers, hv)
		}
	} else {
		a.b.Failed++
		a.b.FailedByClass = inc(a.b.FailedByClass, c)
		r.res.Failed++
		r.res.FailedByClass[c]++
		if _, ok := r.res.Errors[c]; !ok && err != nil {
			if r.res.Errors == nil {
				r.res.Errors = make(map[Class]string)
			}
			r.res.Errors[c] = err.Error()
		}
		if len(r.res.Failures) < MaxFailures {
			f := Failure{AtMS: ms(r.clock() - lat), TookMS: ms(lat), Class: c}
			if err != nil {
				f.Error = err.Error()
			}
			r.res.Failures = append(r.res.Failures, f)
		}
	}
	r.seal(r.clock(), false)
}

func inc[K comparable](m map[K]int64, k K) map[K]int64 {
	if m == nil {
		m = make(map[K]int64)
	}
	m[k]++
	return m
}

// grow makes buckets up to index i live.
func (r *recorder) grow(i int) {
	for r.base+len(r.live) <= i {
		r.live = append(r.live, &acc{b: Bucket{StartMS: ms(time.Duration(r.base+len(r.live)) * r.bucket)}})
	}
}

// seal summarises the oldest live buckets that nothing can change any more
// at time now: none of their requests is in flight, and they end at least
// Window before now, so no later mark is near them. With all, it seals every
// live bucket.
func (r *recorder) seal(now time.Duration, all bool) {
	for len(r.live) > 0 {
		a := r.live[0]
		from := time.Duration(r.base) * r.bucket
		to := from + r.bucket
		if !all && (a.inflight > 0 || to+r.window > now) {
			return
		}
		for k, m := range r.marks {
			// The bucket [from, to) overlaps [m-Window, m+Window].
			if from <= m+r.window && to > m-r.window {
				a.b.NearMark = true
				r.res.Marks[k].Requests += a.b.Requests
				r.res.Marks[k].Failed += a.b.Failed
			}
		}
		if a.h != nil {
			a.b.P99MS = ms(time.Duration(a.h.ValueAtQuantile(99)) * time.Microsecond)
			r.all.Merge(a.h)
			if a.b.NearMark {
				r.near.Merge(a.h)
			} else {
				r.steady.Merge(a.h)
			}
			a.h.Reset()
			r.free = append(r.free, a.h)
		}
		r.res.Buckets = append(r.res.Buckets, a.b)
		r.live[0] = nil
		r.live = r.live[1:]
		r.base++
	}
}

// result ends the timeline at the clock's time and returns the result. The
// timeline covers every bucket up to the end, empty ones included.
func (r *recorder) result() *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	end := r.clock()
	r.stopped = true
	r.grow(int(end / r.bucket))
	r.seal(end, true)
	res := r.res
	res.DurationMS = ms(end)
	res.P50MS, res.P99MS, res.MaxMS = quantiles(r.all)
	res.P50MSSteady, res.P99MSSteady, res.MaxMSSteady = quantiles(r.steady)
	res.P50MSRestart, res.P99MSRestart, res.MaxMSRestart = quantiles(r.near)
	return &res
}

func quantiles(h *hdr.Histogram) (p50, p99, maxv float64) {
	f := func(v int64) float64 { return ms(time.Duration(v) * time.Microsecond) }
	return f(h.ValueAtQuantile(50)), f(h.ValueAtQuantile(99)), f(h.Max())
}
