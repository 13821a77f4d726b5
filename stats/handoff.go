package stats

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
)

// Outcome is how a handoff ended. The set is small and fixed, fit for a
// metric label.
type Outcome string

// The outcomes.
const (
	// OutcomeSuccess: a newer generation serves.
	OutcomeSuccess Outcome = "success"
	// OutcomeFailure: the predecessor reported a failed handoff, or the
	// successor could not start; the old generation still serves.
	OutcomeFailure Outcome = "failure"
	// OutcomeTimeout: the wait for the new generation ended first.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeFallback: a successor's predecessor died during the transfer;
	// it started with fresh sockets (handoff.Upgrader.FallbackReason).
	OutcomeFallback Outcome = "fallback"
)

// Handoff is one handoff, as seen by whoever records it: the trigger
// (handoff.Upgrade), or the new process (handoff.New).
type Handoff struct {
	From    uint64        `json:"from"` // generation before
	To      uint64        `json:"to"`   // generation after (0 when it failed)
	PID     int           `json:"pid,omitempty"`
	Took    time.Duration `json:"took_ns"`
	Sockets int           `json:"sockets"` // fds handed over, when known
	Outcome Outcome       `json:"outcome"` // "" is recorded as OutcomeSuccess
	Reason  string        `json:"reason,omitempty"`
}

// HandoffOf turns what handoff.Upgrade returned (or what
// handoff.Config.OnHandoff was given), and how long it waited, into a
// Handoff: success; timeout when a context or a deadline ended the wait;
// failure otherwise.
func HandoffOf(res handoff.Result, err error, took time.Duration) Handoff {
	if err == nil {
		return Handoff{From: res.From, To: res.To, PID: res.PID, Took: res.Took, Sockets: res.Sockets, Outcome: OutcomeSuccess}
	}
	ho := Handoff{From: res.From, PID: res.PID, Took: took, Sockets: res.Sockets, Outcome: OutcomeFailure, Reason: err.Error()}
	var ue *handoff.UpgradeError
	if errors.As(err, &ue) {
		ho.From = ue.Generation
		if ue.Reason != "" {
			ho.Reason = ue.Reason
		}
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		ho.Outcome = OutcomeTimeout
	}
	return ho
}

// RecordUpgrade records what handoff.Upgrade returned; took is how long the
// call lasted (used when it failed: a Result carries its own duration).
func (h *Hub) RecordUpgrade(res handoff.Result, err error, took time.Duration) {
	h.RecordHandoff(HandoffOf(res, err, took))
}

// RecordUpgrader records what a new process learnt from handoff.New: its
// generation, and a fallback handoff when its predecessor died during the
// transfer. Call it once, after New.
func (h *Hub) RecordUpgrader(u *handoff.Upgrader) {
	gen := u.Generation()
	if err := u.FallbackReason(); err != nil {
		h.RecordHandoff(Handoff{To: gen, Outcome: OutcomeFallback, Reason: err.Error()})
	}
	h.SetGeneration(gen)
}
