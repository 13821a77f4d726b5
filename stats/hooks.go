package stats

import (
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
)

// DrainHook returns a func that records reports under the listener name, for
// drain.Options.OnReport or drain.Server.OnReport.
func (h *Hub) DrainHook(name string) func(*drain.Report) {
	return func(r *drain.Report) { h.RecordDrain(name, r) }
}

// HandoffHook returns a func that records handoffs, for
// handoff.Config.OnHandoff: the process handing its sockets over records each
// attempt, and a success also sets the generation to its successor's.
func (h *Hub) HandoffHook() func(handoff.Result, error) {
	return func(res handoff.Result, err error) { h.RecordHandoff(HandoffOf(res, err, res.Took)) }
}
