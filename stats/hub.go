package stats

import (
	"sort"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/drain"
)

// Hub collects drain reports, handoffs and the serving generation. The zero
// value is ready to use; a Hub is safe for concurrent use and must not be
// copied after first use.
type Hub struct {
	mu         sync.Mutex
	generation uint64
	drains     map[drainKey]*DrainStats
	handoffs   map[Outcome]*HandoffStats
	subs       map[*subscriber]struct{}
	seq        uint64
	dropped    uint64
}

type drainKey struct {
	listener string
	method   drain.Method
}

// RecordDrain adds a drain report under the listener name (a stable name
// such as "http", used as a metric label: never an address with an
// ephemeral port). The report is shared with subscribers and must not be
// changed afterwards. A nil report is ignored.
func (h *Hub) RecordDrain(name string, r *drain.Report) {
	if r == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	k := drainKey{name, r.Method}
	d := h.drains[k]
	if d == nil {
		if h.drains == nil {
			h.drains = map[drainKey]*DrainStats{}
		}
		d = &DrainStats{Listener: name, Method: r.Method, Duration: newHistogram()}
		h.drains[k] = d
	}
	d.add(r)
	h.publishLocked(Event{Kind: KindDrain, Listener: name, Drain: r})
}

// RecordHandoff adds a handoff. A successful one with To > 0 also sets the
// generation to To.
func (h *Hub) RecordHandoff(ho Handoff) {
	if ho.Outcome == "" {
		ho.Outcome = OutcomeSuccess
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.handoffs[ho.Outcome]
	if s == nil {
		if h.handoffs == nil {
			h.handoffs = map[Outcome]*HandoffStats{}
		}
		s = &HandoffStats{Outcome: ho.Outcome, Duration: newHistogram()}
		h.handoffs[ho.Outcome] = s
	}
	s.Handoffs++
	s.Sockets += uint64(max(ho.Sockets, 0))
	s.Duration.observe(ho.Took)
	if ho.Outcome == OutcomeSuccess && ho.To > 0 {
		h.generation = ho.To
	}
	h.publishLocked(Event{Kind: KindHandoff, Handoff: &ho, Generation: h.generation})
}

// SetGeneration sets the generation this process serves (for example
// handoff.Upgrader.Generation). A successful handoff recorded later sets the
// successor's: the Hub's generation is the newest known to serve.
func (h *Hub) SetGeneration(g uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.generation = g
	h.publishLocked(Event{Kind: KindGeneration, Generation: g})
}

// Generation returns the generation last set or recorded.
func (h *Hub) Generation() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.generation
}

// Snapshot returns a copy of the totals, with the kernel counters and
// net.ipv4.tcp_migrate_req of the calling thread's network namespace.
func (h *Hub) Snapshot() Snapshot {
	s := h.Totals()
	s.Kernel = ReadKernel()
	return s
}

// Totals is Snapshot without the kernel: what the Hub recorded, and nothing
// read from the system.
func (h *Hub) Totals() Snapshot {
	h.mu.Lock()
	s := Snapshot{
		Time:          time.Now(),
		Generation:    h.generation,
		Drains:        make([]DrainStats, 0, len(h.drains)),
		Handoffs:      make([]HandoffStats, 0, len(h.handoffs)),
		Events:        h.seq,
		DroppedEvents: h.dropped,
	}
	for _, d := range h.drains {
		c := *d
		c.Duration = d.Duration.clone()
		s.Drains = append(s.Drains, c)
	}
	for _, ho := range h.handoffs {
		c := *ho
		c.Duration = ho.Duration.clone()
		s.Handoffs = append(s.Handoffs, c)
	}
	h.mu.Unlock()
	sort.Slice(s.Drains, func(i, j int) bool {
		a, b := s.Drains[i], s.Drains[j]
		return a.Listener < b.Listener || a.Listener == b.Listener && a.Method < b.Method
	})
	sort.Slice(s.Handoffs, func(i, j int) bool { return s.Handoffs[i].Outcome < s.Handoffs[j].Outcome })
	return s
}
