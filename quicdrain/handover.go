package quicdrain

import (
	"encoding/binary"
	"errors"
	"time"
)

// encodeHandover builds the message a generation sends its successor once
// it stopped reading: its generation, the lineage key, and the live
// entries of its table (client-chosen connection ID, generation, age):
//
//	2 | gen(8) | key(16) | count(4) | count x (len(1) dcid gen(8) age_ms(4))
func encodeHandover(c *cidCodec, live map[string]tableEntry, now time.Time) []byte {
	m := make([]byte, 0, 29+len(live)*33)
	m = append(m, msgHandover)
	m = binary.BigEndian.AppendUint64(m, 0)
	m = append(m, c.key...)
	m = binary.BigEndian.AppendUint32(m, uint32(len(live)))
	for k, e := range live {
		m = append(m, byte(len(k)))
		m = append(m, k...)
		m = binary.BigEndian.AppendUint64(m, e.gen)
		m = binary.BigEndian.AppendUint32(m, uint32(now.Sub(e.seen).Milliseconds()))
	}
	return m
}

var errBadHandover = errors.New("malformed handover")

// applyHandover takes the lineage key and the table of the predecessor's
// handover message. Only Start calls it, before the reader runs.
func (g *Gen) applyHandover(m []byte) error {
	if len(m) < 29 {
		return errBadHandover
	}
	codec, err := newCIDCodec(m[9:25], g.gen)
	if err != nil {
		return err
	}
	count := binary.BigEndian.Uint32(m[25:29])
	rest := m[29:]
	now := time.Now()
	type ent struct {
		k string
		e tableEntry
	}
	var ents []ent
	for range count {
		if len(rest) < 1 || int(rest[0]) > 20 || len(rest) < 1+int(rest[0])+12 {
			return errBadHandover
		}
		n := int(rest[0])
		k := string(rest[1 : 1+n])
		gen := binary.BigEndian.Uint64(rest[1+n:])
		age := time.Duration(binary.BigEndian.Uint32(rest[9+n:])) * time.Millisecond
		if gen >= g.gen {
			return errBadHandover
		}
		ents = append(ents, ent{k, tableEntry{gen: gen, seen: now.Add(-age), initials: 1}})
		rest = rest[13+n:]
	}
	g.codec.Store(codec)
	for _, e := range ents {
		g.table.add(e.k, e.e)
	}
	g.stats.handedOver.Add(int64(len(ents)))
	return nil
}
