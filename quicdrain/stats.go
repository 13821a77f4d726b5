package quicdrain

import "sync/atomic"

// Stats counts what a generation's forwarder did.
type Stats struct {
	Generation uint64
	// Read counts the datagrams this generation read from the UDP socket.
	Read int64
	// Own counts the datagrams given to this generation's Transport (read,
	// or forwarded to it); Received those forwarded to it.
	Own, Received int64
	// Forwarded counts the datagrams queued for an older generation (those
	// then lost because it exited count in DropGone too).
	Forwarded int64
	// Straddled counts Initial or 0-RTT datagrams forwarded by the table:
	// the handshake had begun in another generation.
	Straddled int64
	// MultiInitial counts client-chosen connection IDs that routed more
	// than one Initial or 0-RTT datagram (a ClientHello in two datagrams,
	// or a retransmission).
	MultiInitial int64
	// HandedOver counts the table entries received from the predecessor.
	HandedOver int64
	// Drops, by cause.
	Malformed  int64 // too short, or a DCID over 20 bytes
	Unknown    int64 // not an Initial or 0-RTT, and not one of the lineage's IDs
	DropQueue  int64 // our Transport's queue was full
	DropFull   int64 // the older generation's queue was full
	DropGone   int64 // the older generation has exited
	DropOther  int64 // another error forwarding
	BadForward int64 // a malformed or foreign message on the forwarding socket
	Evicted    int64 // table entries pushed out by newer ones
	// HandoverErrors and HandoverTimeouts count a malformed or missing
	// handover from the predecessor.
	HandoverErrors, HandoverTimeouts int64
}

// Dropped sums the datagrams dropped for any cause.
func (s Stats) Dropped() int64 {
	return s.Malformed + s.Unknown + s.DropQueue + s.DropFull + s.DropGone + s.DropOther
}

type counters struct {
	read, own, received, forwarded, straddled, handedOver                    atomic.Int64
	malformed, unknown, dropQueue, dropFull, dropGone, dropOther, badForward atomic.Int64
	handoverErrors, handoverTimeouts                                         atomic.Int64
}

// Stats returns the generation's counters.
func (g *Gen) Stats() Stats {
	c := &g.stats
	return Stats{
		Generation: g.gen, Read: c.read.Load(), Own: c.own.Load(), Received: c.received.Load(),
		Forwarded: c.forwarded.Load(), Straddled: c.straddled.Load(), MultiInitial: g.table.multi.Load(),
		HandedOver: c.handedOver.Load(), Malformed: c.malformed.Load(), Unknown: c.unknown.Load(),
		DropQueue: c.dropQueue.Load(), DropFull: c.dropFull.Load(), DropGone: c.dropGone.Load(),
		DropOther: c.dropOther.Load(), BadForward: c.badForward.Load(), Evicted: g.table.evicted.Load(),
		HandoverErrors: c.handoverErrors.Load(), HandoverTimeouts: c.handoverTimeouts.Load(),
	}
}
