package worker

import (
	"testing"
	"time"
)

func TestHistogram(t *testing.T) {
	t0 := time.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ts := []time.Time{at(-time.Millisecond), at(0), at(9 * time.Millisecond), at(25 * time.Millisecond), at(2 * time.Second)}
	if got, want := histogram(ts, t0), "<1 | 2 0 1"; got != want {
		t.Errorf("histogram = %q, want %q", got, want)
	}
	if got := histogram(ts, time.Time{}); got != "-" {
		t.Errorf("histogram without a start = %q, want -", got)
	}
	if got, want := histogram(nil, t0), "<0 |"; got != want {
		t.Errorf("empty histogram = %q, want %q", got, want)
	}
}
