package quicdrain

import (
	"sync/atomic"
	"time"
)

// tableEntry is a client-chosen DCID and the generation that has (or had)
// a handshake for it.
type tableEntry struct {
	gen      uint64
	seen     time.Time // first Initial
	initials int       // Initial or 0-RTT datagrams routed by it
}

// dcidTable maps the DCIDs clients chose in their first Initial to the
// generation handling the handshake, so that the second datagram of a
// ClientHello reaches the generation that read the first, whoever reads
// it. It holds at most max entries, each for at most ttl: a flood of
// Initials evicts the oldest. Only the reader goroutine uses it.
type dcidTable struct {
	max  int
	ttl  time.Duration
	m    map[string]*tableEntry
	ring []string // keys in insertion order, len max
	head int      // oldest
	n    int

	evicted atomic.Int64 // entries pushed out before their ttl
	multi   atomic.Int64 // entries that routed a second Initial datagram
}

func newDCIDTable(max int, ttl time.Duration) *dcidTable {
	return &dcidTable{max: max, ttl: ttl, m: make(map[string]*tableEntry, max), ring: make([]string, max)}
}

// lookup returns the entry of dcid, if it lives.
func (t *dcidTable) lookup(dcid []byte, now time.Time) (*tableEntry, bool) {
	e, ok := t.m[string(dcid)]
	if !ok || now.Sub(e.seen) > t.ttl {
		return nil, false
	}
	return e, true
}

// route counts one more Initial datagram of dcid for gen, adding the entry
// if it is new or expired.
func (t *dcidTable) route(dcid []byte, gen uint64, now time.Time) {
	if e, ok := t.lookup(dcid, now); ok {
		e.initials++
		if e.initials == 2 {
			t.multi.Add(1)
		}
		return
	}
	t.add(string(dcid), tableEntry{gen: gen, seen: now, initials: 1})
}

// add inserts an entry (one received in a handover, or a new one).
func (t *dcidTable) add(key string, e tableEntry) {
	if old, ok := t.m[key]; ok {
		*old = e
		return
	}
	if t.n == t.max {
		k := t.ring[t.head]
		if old, ok := t.m[k]; ok && time.Since(old.seen) <= t.ttl {
			t.evicted.Add(1)
		}
		delete(t.m, k)
		t.head = (t.head + 1) % t.max
		t.n--
	}
	t.ring[(t.head+t.n)%t.max] = key
	t.n++
	e2 := e
	t.m[key] = &e2
}

// live returns the entries younger than ttl.
func (t *dcidTable) live(now time.Time) map[string]tableEntry {
	out := make(map[string]tableEntry)
	for k, e := range t.m {
		if now.Sub(e.seen) <= t.ttl {
			out[k] = *e
		}
	}
	return out
}
