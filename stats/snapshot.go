package stats

import (
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
)

// Snapshot is a copy of a Hub's totals at Time, with the kernel's view. It
// marshals to JSON.
type Snapshot struct {
	Time       time.Time      `json:"time"`
	Generation uint64         `json:"generation"` // 0 until set or recorded
	Drains     []DrainStats   `json:"drains"`     // by listener, then method
	Handoffs   []HandoffStats `json:"handoffs"`   // by outcome
	Kernel     Kernel         `json:"kernel"`
	// Events counts the events published; DroppedEvents those a subscriber's
	// full buffer refused (counted once per subscriber).
	Events        uint64 `json:"events"`
	DroppedEvents uint64 `json:"dropped_events"`
}

// DrainStats are the totals of the drains of one listener name by one method.
// The connection figures add up the reports' fields: Queued is the sum of
// QueuedAtStop, and Migrated + Accepted + LeftQueued + Remainder account for
// it, except that Migrated is a namespace-wide counter delta (see
// drain.Report.Estimated) and can exceed the share of this listener.
type DrainStats struct {
	Listener string       `json:"listener"`
	Method   drain.Method `json:"method"`
	Drains   uint64       `json:"drains"`
	// Lossy counts drains whose report shows a remainder or connections
	// forced closed at the deadline.
	Lossy         uint64 `json:"lossy"`
	Queued        uint64 `json:"queued"`
	Migrated      uint64 `json:"migrated"`
	MigrateFailed uint64 `json:"migrate_failed"`
	Accepted      uint64 `json:"accepted"`
	LeftQueued    uint64 `json:"left_queued"`
	Remainder     uint64 `json:"remainder"`
	OutRsts       uint64 `json:"out_rsts"`
	// Forced counts HTTP connections closed at the deadline (drain.Server).
	Forced uint64 `json:"forced"`
	// IdleClosed counts keep-alive connections closed idle after
	// drain.Server.IdleGrace (drain.HTTPReport.IdleClosed).
	IdleClosed uint64 `json:"idle_closed"`
	// IdleClosedTLS counts those of IdleClosed that were TLS connections,
	// which cannot be handed over.
	IdleClosedTLS uint64 `json:"idle_closed_tls"`
	// HandedOver counts keep-alive connections passed to a successor
	// (drain.HTTPReport.HandedOver), HandOverReturned those offered that it
	// did not take, Received those served from a predecessor.
	HandedOver       uint64 `json:"handed_over"`
	HandOverReturned uint64 `json:"handover_returned"`
	Received         uint64 `json:"received"`
	// HandedOverTLS counts those of HandedOver that were TLS connections,
	// passed with their session (drain.Server.TLSHandOver;
	// drain.HTTPReport.HandedOverTLS); TLSNotHandedOver the TLS
	// connections that could not be (TLS 1.2, client certificates, a
	// state not proven), closed as without the option.
	HandedOverTLS    uint64 `json:"handed_over_tls"`
	TLSNotHandedOver uint64 `json:"tls_not_handed_over"`
	// Duration is the distribution of the reports' Took (the listener stop;
	// for drain.Server, the whole Shutdown).
	Duration Histogram `json:"duration"`
}

func (d *DrainStats) add(r *drain.Report) {
	d.Drains++
	d.Queued += nonNeg(r.QueuedAtStop)
	d.Migrated += nonNeg(r.Migrated)
	d.MigrateFailed += nonNeg(r.MigrateFailed)
	d.Accepted += nonNeg(r.Accepted)
	d.LeftQueued += nonNeg(r.LeftQueued)
	d.Remainder += nonNeg(r.Remainder)
	d.OutRsts += nonNeg(r.OutRsts)
	took := r.Took
	if r.HTTP != nil {
		d.Forced += uint64(len(r.HTTP.Forced))
		d.IdleClosed += nonNeg(r.HTTP.IdleClosed)
		d.IdleClosedTLS += nonNeg(r.HTTP.IdleClosedTLS)
		d.HandedOver += nonNeg(r.HTTP.HandedOver)
		d.HandOverReturned += nonNeg(r.HTTP.HandOverReturned)
		d.Received += nonNeg(r.HTTP.Received)
		d.HandedOverTLS += nonNeg(r.HTTP.HandedOverTLS)
		d.TLSNotHandedOver += nonNeg(r.HTTP.TLSNotHandedOver)
		took = max(took, r.HTTP.Took)
	}
	if r.Remainder > 0 || r.HTTP != nil && len(r.HTTP.Forced) > 0 {
		d.Lossy++
	}
	d.Duration.observe(took)
}

func nonNeg(n int) uint64 { return uint64(max(n, 0)) }

// HandoffStats are the totals of the handoffs of one outcome.
type HandoffStats struct {
	Outcome  Outcome   `json:"outcome"`
	Handoffs uint64    `json:"handoffs"`
	Sockets  uint64    `json:"sockets"` // sockets handed over, summed
	Duration Histogram `json:"duration"`
}

// Kernel is what the kernel counts in the calling thread's network namespace.
type Kernel struct {
	Counters reuseport.Counters `json:"counters"`
	// MigrateReq is net.ipv4.tcp_migrate_req; nil when it could not be read
	// (kernels before 5.14).
	MigrateReq *bool `json:"migrate_req,omitempty"`
	// Err is why the counters could not be read; they are then zero.
	Err string `json:"error,omitempty"`
}

// durationBuckets are the upper bounds, in seconds, of the duration
// histograms: drains take milliseconds to seconds, handoffs up to the
// ReadyTimeout (2 min by default).
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// DurationBuckets returns the upper bounds, in seconds, of the duration
// histograms (a copy).
func DurationBuckets() []float64 { return append([]float64(nil), durationBuckets...) }

// Histogram is a distribution of durations. Counts[i] is the number of
// observations at most Bounds[i] seconds (cumulative, as Prometheus has it);
// Count includes those above the last bound. Bounds is shared: do not
// change it.
type Histogram struct {
	Bounds []float64 `json:"bounds"`
	Counts []uint64  `json:"counts"`
	Count  uint64    `json:"count"`
	Sum    float64   `json:"sum_seconds"`
}

func newHistogram() Histogram {
	return Histogram{Bounds: durationBuckets, Counts: make([]uint64, len(durationBuckets))}
}

func (h *Histogram) observe(d time.Duration) {
	s := max(d, 0).Seconds()
	h.Count++
	h.Sum += s
	for i := len(h.Bounds) - 1; i >= 0 && s <= h.Bounds[i]; i-- {
		h.Counts[i]++
	}
}

func (h Histogram) clone() Histogram {
	h.Counts = append([]uint64(nil), h.Counts...)
	return h
}
