package quicdrain

// QUIC versions whose long header types we read (RFC 9000, RFC 9369).
const (
	version1 = 0x00000001
	version2 = 0x6b3343cf
)

// header is what routing needs of a datagram's first packet.
type header struct {
	long bool
	// clientChosen: an Initial or 0-RTT packet, whose DCID may be the one
	// the client chose.
	clientChosen bool
	dcid         []byte
}

// parseHeader reads the DCID of b's first packet (RFC 8999: the
// version-independent properties); ok is false for a datagram too short or
// whose DCID is longer than 20 bytes. A short header's DCID is taken as
// CIDLen long, the length of ours.
func parseHeader(b []byte) (h header, ok bool) {
	if len(b) == 0 {
		return h, false
	}
	if b[0]&0x80 == 0 {
		if len(b) < 1+CIDLen {
			return h, false
		}
		return header{dcid: b[1 : 1+CIDLen]}, true
	}
	if len(b) < 6 {
		return h, false
	}
	n := int(b[5])
	if n > 20 || len(b) < 6+n {
		return h, false
	}
	h = header{long: true, dcid: b[6 : 6+n]}
	typ := b[0] & 0x30 >> 4
	switch uint32(b[1])<<24 | uint32(b[2])<<16 | uint32(b[3])<<8 | uint32(b[4]) {
	case version1:
		h.clientChosen = typ == 0 || typ == 1 // Initial, 0-RTT
	case version2:
		h.clientChosen = typ == 1 || typ == 2
	default:
		// another version (or a version negotiation): the newest
		// generation answers it
		h.clientChosen = true
	}
	return h, true
}
