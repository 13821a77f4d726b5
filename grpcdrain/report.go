package grpcdrain

import (
	"slices"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"go.uber.org/zap"
)

// Report is what Server.Shutdown did. It marshals to JSON.
type Report struct {
	// Listeners is the listener stop of each listener served, in the order
	// Serve was called (its HTTP field is nil).
	Listeners []*drain.Report `json:"listeners"`
	// InFlightAtStart is the RPCs in flight when the drain began.
	InFlightAtStart int `json:"in_flight_at_start"`
	// Completed is the RPCs that ended after the drain began, Failed those
	// of them that ended with an error (forced ones included).
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	// Conns is the gRPC connections open when GracefulStop began, each sent
	// a GOAWAY.
	Conns int `json:"conns"`
	// Forced is the RPCs still in flight at the deadline, ended by Stop.
	Forced []ForcedRPC `json:"forced,omitempty"`
	// HandlersLeft: after Stop, handlers were still running (they ignore
	// their context).
	HandlersLeft bool `json:"handlers_left,omitempty"`

	Started      time.Time     `json:"started"`
	DelayTook    time.Duration `json:"delay_ns"`
	StopTook     time.Duration `json:"stop_ns"`     // the listener stops, until gRPC took every connection accepted
	GracefulTook time.Duration `json:"graceful_ns"` // GracefulStop, and Stop if the deadline came
	Took         time.Duration `json:"took_ns"`     // the whole Shutdown
}

// ForcedRPC is an RPC ended at the deadline.
type ForcedRPC struct {
	Method string        `json:"method"` // full method name, "/package.Service/Method"
	Stream bool          `json:"stream"` // a client or server stream
	Age    time.Duration `json:"age_ns"`
}

// clone is a deep copy of r.
func (r *Report) clone() *Report {
	if r == nil {
		return nil
	}
	c := *r
	c.Forced = slices.Clone(r.Forced)
	c.Listeners = make([]*drain.Report, len(r.Listeners))
	for i, l := range r.Listeners {
		if l != nil {
			lc := *l
			lc.OtherHolders = slices.Clone(l.OtherHolders)
			lc.Unreadable = slices.Clone(l.Unreadable)
			lc.Errors = slices.Clone(l.Errors)
			c.Listeners[i] = &lc
		}
	}
	return &c
}

// Remainder is the queued connections the listener stops may have lost
// (the sum of drain.Report.Remainder).
func (r *Report) Remainder() int {
	n := 0
	for _, l := range r.Listeners {
		if l != nil {
			n += l.Remainder
		}
	}
	return n
}

// log writes the report as one structured line.
func (r *Report) log(log *zap.Logger) {
	methods := make([]string, len(r.Forced))
	for i, f := range r.Forced {
		methods[i] = f.Method
	}
	fields := []zap.Field{
		zap.String("event", "grpcdrain.done"), zap.Int("listeners", len(r.Listeners)), zap.Int("remainder", r.Remainder()),
		zap.Int("in_flight_at_start", r.InFlightAtStart), zap.Int("completed", r.Completed), zap.Int("failed", r.Failed),
		zap.Int("conns", r.Conns), zap.Strings("forced", methods), zap.Duration("took", r.Took),
	}
	if r.Remainder() > 0 || len(r.Forced) > 0 {
		log.Warn("grpc drained with losses", fields...)
		return
	}
	log.Info("grpc drained", fields...)
}
