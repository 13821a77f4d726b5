package tlsresume

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// record follows one whole record of direction d (header d.hdr); keep
// reports whether it is now d's last record (to be copied by the caller:
// see keepLast). Called with r.mu.
func (r *Recorder) record(d *direction, read bool, payload []byte) (keep bool) {
	typ := d.hdr[0]
	if read && !r.hello {
		r.clientHello(payload)
		return false
	}
	if d.h == nil {
		switch {
		case typ == typeApplication:
			return r.trial(d, read, payload)
		case typ == typeHandshake && !read && !r.shello:
			r.suiteOf(payload)
		}
		return false // the handshake's plaintext records, change_cipher_spec
	}
	if typ != typeApplication {
		r.fail(fmt.Errorf("record of outer type %d after the handshake", typ))
		return false
	}
	d.lastSeq, d.lastPrev = d.h.seq, false
	if !read && len(payload) > smallWrite {
		d.h.seq++ // application data or a NewSessionTicket of ours
		return true
	}
	pt, err := d.h.aead.Open(d.scratch[:0], d.h.nonce(), payload, d.hdr[:])
	if err != nil {
		r.fail(fmt.Errorf("record %d does not authenticate where it must", d.h.seq))
		return false
	}
	d.h.seq++
	r.inner(d, read, pt)
	clear(pt)
	if cap(pt) <= keepBuffer {
		d.scratch = pt[:0]
	}
	return true
}

// clientHello takes the client random from the connection's first record.
func (r *Recorder) clientHello(p []byte) {
	// handshake type 1, length (3), legacy_version (2), random (32)
	if r.in.hdr[0] != typeHandshake || len(p) < 4+2+32 || p[0] != 1 {
		r.fail(errors.New("first record is not a whole ClientHello"))
		return
	}
	copy(r.random[:], p[6:38])
	r.hello = true
}

// suiteOf takes the cipher suite from the server's first handshake record,
// its ServerHello (or HelloRetryRequest, which names the same suite). A
// TLS 1.3 suite this process cannot continue (ChaCha20-Poly1305 not
// registered) makes the connection unprovable with an
// *UnsupportedSuiteError; one it can is the only suite trial tries. A
// TLS 1.2 suite is left to the checks as before (no application traffic
// secret is ever logged). Called with r.mu.
func (r *Recorder) suiteOf(p []byte) {
	r.shello = true
	// handshake type 2, length (3), legacy_version (2), random (32),
	// legacy_session_id (1 + n), cipher_suite (2)
	const sidAt = 4 + 2 + 32
	if len(p) < sidAt+1 || p[0] != 2 || len(p) < sidAt+1+int(p[sidAt])+2 {
		r.fail(errors.New("first record written is not a whole ServerHello"))
		return
	}
	id := binary.BigEndian.Uint16(p[sidAt+1+int(p[sidAt]):])
	if id>>8 != 0x13 {
		return // not a TLS 1.3 suite
	}
	s, err := suiteByID(id)
	if err != nil {
		r.fail(err)
		return
	}
	r.suite = s
}

// trial opens an encrypted record of d at sequence number 0 with the
// application keys: the first that authenticates starts d's application
// records; the others were the handshake's. Called with r.mu.
func (r *Recorder) trial(d *direction, read bool, payload []byte) (keep bool) {
	d.trials++
	if d.trials > maxTrials {
		r.fail(errors.New("no record under the application traffic secret"))
		return false
	}
	secret := r.secretFor(read)
	if secret == nil {
		return false // not logged yet: a handshake record (or not TLS 1.3)
	}
	for _, s := range r.suitesFor(len(secret)) {
		h, err := newHalf(s, append([]byte(nil), secret...), 0)
		if err != nil {
			continue
		}
		pt, err := h.aead.Open(nil, h.nonce(), payload, d.hdr[:])
		if err != nil {
			h.zero()
			continue
		}
		r.suite, d.h = s, h
		clear(d.first)
		d.first = nil
		d.lastSeq = 0
		h.seq = 1
		r.inner(d, read, pt)
		clear(pt)
		return true
	}
	return false
}

// secretFor returns the application traffic secret of a direction (the
// client's for read), claiming both from the Capture on first use.
func (r *Recorder) secretFor(read bool) []byte {
	if !r.hello {
		return nil
	}
	if !r.claimed {
		if cs, ss, ok := r.capture.claim(r.random); ok {
			r.in.first, r.out.first, r.claimed = cs, ss, true
		}
	}
	if read {
		return r.in.first
	}
	return r.out.first
}

// suitesFor lists the available TLS 1.3 suites whose secrets are n bytes
// long, the one already chosen (by the ServerHello, or the other direction)
// alone.
func (r *Recorder) suitesFor(n int) []*suite {
	if r.suite != nil {
		return []*suite{r.suite}
	}
	var out []*suite
	for i := range suites {
		if suites[i].secretLen() == n && suites[i].available() {
			out = append(out, &suites[i])
		}
	}
	return out
}

// inner follows the plaintext of an application record. Called with r.mu.
func (r *Recorder) inner(d *direction, read bool, pt []byte) {
	typ, content, err := innerPlaintext(pt)
	if err != nil {
		r.fail(err)
		return
	}
	switch {
	case typ == typeApplication && read:
		if err := r.req.feed(content); err != nil {
			r.fail(err)
		}
	case typ == typeApplication:
	case typ == typeHandshake && len(content) == 5 && content[0] == hsKeyUpdate && content[4] <= 1:
		clear(d.prev)
		d.prev = append([]byte(nil), d.h.secret...)
		if err := d.h.update(); err != nil {
			r.fail(err)
			return
		}
		d.lastPrev = true
	case typ == typeHandshake && !read && len(content) > 0 && content[0] == 4:
		// our NewSessionTicket
	default:
		r.fail(fmt.Errorf("record of content type %d in the application phase", typ))
	}
}

// keepLast copies the record hdr, payload as d's last, in a buffer no
// larger than it needs when it is small (see keepBuffer).
func (d *direction) keepLast(hdr, payload []byte) {
	n := recordHeaderLen + len(payload)
	if cap(d.last) > keepBuffer && n <= keepBuffer {
		clear(d.last)
		d.last = nil
	}
	d.last = append(append(d.last[:0], hdr...), payload...)
}
