package load

import (
	"errors"
	"math"
	"testing"
	"time"
)

const msec = time.Millisecond

// fakeRecorder returns a started recorder with 100 ms buckets, a ±200 ms
// window, and a clock the test sets.
func fakeRecorder() (*recorder, *time.Duration) {
	r := newRecorder(100*msec, 200*msec)
	now := new(time.Duration)
	r.start(time.Unix(0, 0), func() time.Duration { return *now })
	return r, now
}

// send records one request sent at offset at that took lat.
func send(r *recorder, now *time.Duration, at, lat time.Duration, c Class) {
	*now = at
	i := r.begin(at)
	*now = at + lat
	var err error
	if c != OK {
		err = errors.New(string(c))
	}
	r.done(i, lat, c, "g1", err)
}

func near(got, want float64) bool { return math.Abs(got-want) <= want/100 }

func TestRecorderBuckets(t *testing.T) {
	r, now := fakeRecorder()
	// 20 buckets of 10 requests of 1 ms; bucket 10 is slow (50 ms), and
	// bucket 11 has one reset. A mark at 1050 ms is near buckets 8 to 12:
	// [850, 1250] overlaps [800, 900) and [1200, 1300) but not [700, 800) or
	// [1300, 1400).
	for b := range 20 {
		at := time.Duration(b) * 100 * msec
		if b == 10 {
			*now = 1050 * msec
			r.mark("restart")
		}
		for k := range 10 {
			lat := 1 * msec
			if b == 10 {
				lat = 50 * msec
			}
			send(r, now, at+time.Duration(k)*msec, lat, OK)
		}
		if b == 11 {
			send(r, now, at+50*msec, msec, Reset)
		}
	}
	*now = 2000 * msec
	res := r.result()

	if res.Requests != 201 || res.Failed != 1 || res.FailedByClass[Reset] != 1 || res.FailedByClass[EOF] != 0 {
		t.Fatalf("requests %d, failed %d, by class %v; want 201, 1, reset 1", res.Requests, res.Failed, res.FailedByClass)
	}
	if len(res.FailedByClass) != len(failures) {
		t.Errorf("failed_by_class has %d classes, want all %d", len(res.FailedByClass), len(failures))
	}
	if len(res.Buckets) != 21 { // 0..2000 ms: 20 full buckets and the one at the end
		t.Fatalf("%d buckets, want 21", len(res.Buckets))
	}
	for i, b := range res.Buckets {
		wantNear := i >= 8 && i <= 12
		if b.NearMark != wantNear || b.StartMS != float64(i*100) {
			t.Errorf("bucket %d: start %v near %v, want %d %v", i, b.StartMS, b.NearMark, i*100, wantNear)
		}
	}
	if b := res.Buckets[10]; !near(b.P99MS, 50) || b.Requests != 10 {
		t.Errorf("bucket 10: p99 %v ms, %d requests; want 50 ms, 10", b.P99MS, b.Requests)
	}
	if b := res.Buckets[11]; b.Failed != 1 || b.FailedByClass[Reset] != 1 || b.Requests != 11 {
		t.Errorf("bucket 11: %+v, want 11 requests, 1 reset", b)
	}
	if !near(res.P99MSSteady, 1) || !near(res.MaxMSSteady, 1) {
		t.Errorf("steady p99 %v max %v, want 1 ms", res.P99MSSteady, res.MaxMSSteady)
	}
	// Around the mark: 40 requests of 1 ms and 10 of 50 ms.
	if !near(res.P50MSRestart, 1) || !near(res.P99MSRestart, 50) || !near(res.MaxMS, 50) {
		t.Errorf("restart p50 %v p99 %v, max %v; want 1, 50, 50", res.P50MSRestart, res.P99MSRestart, res.MaxMS)
	}
	want := Event{Name: "restart", AtMS: 1050, Requests: 51, Failed: 1}
	if len(res.Marks) != 1 || res.Marks[0] != want {
		t.Errorf("marks %+v, want [%+v]", res.Marks, want)
	}
	if res.Headers["g1"] != 200 || res.Errors[Reset] != "reset" {
		t.Errorf("headers %v errors %v, want g1: 200, reset: reset", res.Headers, res.Errors)
	}
}

// A bucket is sealed only when none of its requests is in flight and it ended
// at least a window ago; until then, later buckets stay live too.
func TestRecorderSealing(t *testing.T) {
	r, now := fakeRecorder()
	slow := r.begin(10 * msec)
	for at := 100 * msec; at < 3*time.Second; at += 100 * msec {
		send(r, now, at, msec, OK)
	}
	if r.base != 0 || len(r.live) != 30 {
		t.Fatalf("with a request in flight: base %d, %d live; want 0, 30", r.base, len(r.live))
	}
	*now = 3 * time.Second
	r.done(slow, 2990*msec, Timeout, "", nil)
	// Buckets ending at or before 3000-200 ms are sealed: 0..27.
	if r.base != 28 || len(r.live) != 2 {
		t.Errorf("after it: base %d, %d live; want 28, 2", r.base, len(r.live))
	}
	// A scheduler running late begins a request in a sealed bucket: it goes
	// to the oldest live one.
	if i := r.begin(500 * msec); i != 28 {
		t.Errorf("late begin went to bucket %d, want 28", i)
	}
	r.abort(28)
	res := r.result()
	if res.Requests != 30 || res.FailedByClass[Timeout] != 1 || len(res.Buckets) != 31 {
		t.Errorf("requests %d, timeouts %d, %d buckets; want 30, 1, 31", res.Requests, res.FailedByClass[Timeout], len(res.Buckets))
	}
	if b := res.Buckets[0]; b.Requests != 1 || b.Failed != 1 || b.P99MS != 0 {
		t.Errorf("bucket 0: %+v, want the one timeout", b)
	}
}

func TestRecorderMarkBounds(t *testing.T) {
	r := newRecorder(100*msec, 200*msec)
	r.mark("before")
	now := 500 * msec
	r.start(time.Unix(0, 0), func() time.Duration { return now })
	r.mark("during")
	res := r.result()
	r.mark("after")
	if len(res.Marks) != 2 || res.Marks[0].AtMS != 0 || res.Marks[1].AtMS != 500 {
		t.Errorf("marks %+v, want before at 0 and during at 500", res.Marks)
	}
	if len(r.res.Marks) != 2 {
		t.Errorf("a mark after the end was kept: %+v", r.res.Marks)
	}
	// No request: 0..500 ms is 6 empty buckets, near "before" (0..2) and
	// "during" (3..5).
	if len(res.Buckets) != 6 {
		t.Errorf("%d buckets, want 6", len(res.Buckets))
	}
	for i, b := range res.Buckets {
		if !b.NearMark || b.Requests != 0 {
			t.Errorf("bucket %d: %+v", i, b)
		}
	}
}

// Failures keeps the first MaxFailures failed requests: when each was sent,
// how long it took, its class and error.
func TestRecorderFailures(t *testing.T) {
	r, now := fakeRecorder()
	send(r, now, 10*msec, 5*msec, OK)
	send(r, now, 20*msec, 1500*msec, EOF)
	for k := range MaxFailures + 5 {
		send(r, now, 2000*msec+time.Duration(k)*msec, msec, Reset)
	}
	*now = 3000 * msec
	res := r.result()
	if res.Failed != MaxFailures+6 || len(res.Failures) != MaxFailures {
		t.Fatalf("failed %d, detailed %d; want %d, %d", res.Failed, len(res.Failures), MaxFailures+6, MaxFailures)
	}
	if f := res.Failures[0]; f != (Failure{AtMS: 20, TookMS: 1500, Class: EOF, Error: "eof"}) {
		t.Errorf("first failure %+v, want sent at 20 ms, took 1500 ms, eof", f)
	}
	if f := res.Failures[MaxFailures-1]; f.Class != Reset || f.AtMS != float64(2000+MaxFailures-2) {
		t.Errorf("last failure kept %+v, want the reset sent at %d ms", f, 2000+MaxFailures-2)
	}
}
