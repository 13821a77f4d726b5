package stats

import (
	"context"
	"time"

	"github.com/zerodrop/zerodrop/drain"
)

// SubscriberBuffer is how many events a subscriber's channel holds; beyond
// that, events for it are dropped and counted.
const SubscriberBuffer = 64

// Kind says what an Event records.
type Kind string

// The kinds of events.
const (
	KindDrain      Kind = "drain"
	KindHandoff    Kind = "handoff"
	KindGeneration Kind = "generation"
)

// Event is one record, as subscribers see it. Drain and Handoff are shared
// between subscribers: read them, do not change them.
type Event struct {
	Seq        uint64        `json:"seq"` // 1, 2, ... per Hub
	Time       time.Time     `json:"time"`
	Kind       Kind          `json:"kind"`
	Listener   string        `json:"listener,omitempty"` // KindDrain
	Drain      *drain.Report `json:"drain,omitempty"`    // KindDrain
	Handoff    *Handoff      `json:"handoff,omitempty"`  // KindHandoff
	Generation uint64        `json:"generation"`         // after the event
}

type subscriber struct{ ch chan Event }

// Subscribe returns a channel that receives every event recorded from now
// on, until ctx ends; then the channel is closed. The channel holds
// SubscriberBuffer events: when it is full, events are dropped for this
// subscriber and counted in Snapshot.DroppedEvents, and the recorder never
// waits. A ctx that never ends keeps the subscription for the Hub's life.
func (h *Hub) Subscribe(ctx context.Context) <-chan Event {
	s := &subscriber{ch: make(chan Event, SubscriberBuffer)}
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[*subscriber]struct{}{}
	}
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		delete(h.subs, s)
		close(s.ch)
		h.mu.Unlock()
	})
	return s.ch
}

// publishLocked numbers e and offers it to every subscriber without
// waiting. h.mu is held.
func (h *Hub) publishLocked(e Event) {
	h.seq++
	e.Seq = h.seq
	if e.Generation == 0 {
		e.Generation = h.generation
	}
	if len(h.subs) == 0 {
		return
	}
	e.Time = time.Now()
	for s := range h.subs {
		select {
		case s.ch <- e:
		default:
			h.dropped++
		}
	}
}
