package quicdrain

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"go.uber.org/zap"
)

// readUDP reads the shared UDP socket until its read deadline is set in
// the past (Handover, Close), routing each datagram.
func (g *Gen) readUDP(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 65536)
	for {
		n, src, err := g.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, net.ErrClosed) {
				g.cfg.Logger.Warn("read", zap.String("event", "quic.read_error"), zap.Error(err))
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return
		}
		g.stats.read.Add(1)
		g.route(buf[:n], src, time.Now())
	}
}

// route sends datagram b to the generation it belongs to: a short header
// or a Handshake packet by the generation in its connection ID (one that
// is not the lineage's is dropped); an Initial or 0-RTT packet by the
// table of client-chosen IDs, else by a connection ID of ours, else to us
// (a new connection, recorded in the table).
func (g *Gen) route(b []byte, src netip.AddrPort, now time.Time) {
	h, ok := parseHeader(b)
	if !ok {
		g.stats.malformed.Add(1)
		return
	}
	codec := g.codec.Load()
	dest := g.gen
	switch gb, ours := codec.generation(h.dcid); {
	case h.clientChosen:
		if e, ok := g.table.lookup(h.dcid, now); ok {
			dest = e.gen
			if e.gen != g.gen {
				g.stats.straddled.Add(1)
			}
			g.table.route(h.dcid, e.gen, now)
		} else if ours {
			dest = g.owner(gb)
		} else {
			g.table.route(h.dcid, g.gen, now)
		}
	case ours:
		dest = g.owner(gb)
	default:
		g.stats.unknown.Add(1)
		return
	}
	if dest == g.gen {
		g.deliver(b, src, h.long)
		return
	}
	g.forward(dest, src, b)
}

// owner returns the generation, at most ours, whose low byte is gb.
func (g *Gen) owner(gb byte) uint64 {
	return g.gen - uint64(byte(g.gen)-gb)
}

func (g *Gen) deliver(b []byte, src netip.AddrPort, long bool) {
	if long {
		g.lastLong.Store(time.Now().UnixNano())
	}
	if !g.own.deliver(b, net.UDPAddrFromAddrPort(src)) {
		g.stats.dropQueue.Add(1)
		return
	}
	g.stats.own.Add(1)
}

func (g *Gen) forward(to uint64, src netip.AddrPort, b []byte) {
	d := g.dests[to]
	if d == nil {
		var err error
		if d, err = dialDest(g.path(to), to, g.cfg.Queue, &g.stats.dropGone); err != nil {
			// gone (or never there): remember it, no dial per datagram
			d = &dest{gen: to}
			d.gone.Store(true)
		}
		g.dests[to] = d
	}
	if d.gone.Load() {
		g.stats.dropGone.Add(1)
		return
	}
	var buf []byte
	if len(b) <= 2048-20 {
		buf = *bufPool.Get().(*[]byte)
	} else {
		buf = make([]byte, 0, len(b)+20)
	}
	if !d.send(encodeData(buf, src, b)) {
		putBuf(buf)
		g.stats.dropFull.Add(1)
		return
	}
	g.stats.forwarded.Add(1)
}

// closeDests stops the writers to older generations (the reader has
// stopped).
func (g *Gen) closeDests() {
	for k, d := range g.dests {
		d.close()
		delete(g.dests, k)
	}
}

// readFwd reads the forwarding socket until it is closed: datagrams a
// newer generation forwarded go to our Transport; a handover from our
// predecessor goes to Start.
func (g *Gen) readFwd() {
	buf := make([]byte, 1<<18)
	pred := g.path(g.gen - 1)
	for {
		n, from, err := g.fwd.c.ReadFromUnix(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if n == 0 {
			g.stats.badForward.Add(1)
			continue
		}
		m := buf[:n]
		switch m[0] {
		case msgData:
			src, b, ok := decodeData(m)
			if !ok {
				g.stats.badForward.Add(1)
				continue
			}
			g.stats.received.Add(1)
			h, _ := parseHeader(b)
			g.deliver(b, src, h.long)
		case msgHandover:
			if from == nil || from.Name != pred {
				g.stats.badForward.Add(1)
				continue
			}
			cp := append([]byte(nil), m...)
			select {
			case g.handover <- cp:
			default:
			}
		default:
			g.stats.badForward.Add(1)
		}
	}
}
