package tlsresume

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ConnState follows net/http's state for the connection: pass it every
// state of http.Server.ConnState for the tls.Conn over r.
func (r *Recorder) ConnState(s http.ConnState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idle, r.deadlines = s == http.StateIdle, 0
}

// SetReadDeadline passes crypto/tls's (net/http's) deadline on, counting
// them since the connection went idle.
func (r *Recorder) SetReadDeadline(t time.Time) error {
	r.mu.Lock()
	if r.frozen {
		r.mu.Unlock()
		return nil
	}
	r.deadlines++
	r.mu.Unlock()
	return r.Conn.SetReadDeadline(t)
}

// ProveIdleHTTP checks that the connection is an idle HTTP/1.1 keep-alive
// connection of net/http over a TLS 1.3 session whose record-layer state r
// knows exactly, and if so freezes it: from then on no byte passes between
// crypto/tls and the socket, and Take must follow. Otherwise it returns an
// error wrapping ErrNotProven and changes nothing. The checks:
//
//   - net/http waits for the next request: idle (ConnState), with one
//     SetReadDeadline since (its idle timeout, before it peeks at the next
//     request), and crypto/tls blocked in Read, so it holds no whole record
//     and no plaintext (it reads only when it has none);
//   - the application data read, followed as HTTP/1.1 requests (their
//     bodies framed by Content-Length or chunked), ends exactly where a
//     request ends: net/http, idle and reading, holds none of it;
//   - both directions' application records were all followed (see Recorder),
//     and the last record each way authenticates under keys derived anew
//     from the secret r hands over (or, for a KeyUpdate, the one before it)
//     at the sequence number before the one it hands over.
func (r *Recorder) ProveIdleHTTP() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotProven, err)
	}
	r.frozen = true
	r.released = make(chan struct{})
	return nil
}

// check is ProveIdleHTTP's checks. Called with r.mu.
func (r *Recorder) check() error {
	switch {
	case r.broken != nil:
		return r.broken
	case r.in.h == nil || r.out.h == nil:
		return errors.New("no application record each way (not TLS 1.3, or no request yet)")
	case !r.idle || r.deadlines != 1 || !r.inRead:
		return ErrBusy
	case !r.req.atStart():
		return errors.New("the data read does not end where a request ends")
	}
	if err := verifyLast(r.suite, &r.in); err != nil {
		return fmt.Errorf("last record read: %w", err)
	}
	if err := verifyLast(r.suite, &r.out); err != nil {
		return fmt.Errorf("last record written: %w", err)
	}
	return nil
}

// verifyLast opens d's last record with keys derived anew from the secret
// it was sent under, at its sequence number, and checks that d's next
// sequence number follows it.
func verifyLast(s *suite, d *direction) error {
	secret := d.h.secret
	if d.lastPrev {
		secret = d.prev
	}
	h, err := newHalf(s, append([]byte(nil), secret...), d.lastSeq)
	if err != nil {
		return err
	}
	defer h.zero()
	if len(d.last) < recordHeaderLen {
		return errors.New("no record")
	}
	pt, err := h.aead.Open(nil, h.nonce(), d.last[recordHeaderLen:], d.last[:recordHeaderLen])
	if err != nil {
		return fmt.Errorf("does not authenticate at sequence number %d", d.lastSeq)
	}
	defer clear(pt)
	typ, content, err := innerPlaintext(pt)
	if err != nil {
		return err
	}
	isUpdate := typ == typeHandshake && len(content) == 5 && content[0] == hsKeyUpdate
	switch {
	case isUpdate != d.lastPrev:
		return errors.New("KeyUpdate state unknown")
	case d.lastPrev && d.h.seq != 0, !d.lastPrev && d.h.seq != d.lastSeq+1:
		return fmt.Errorf("sequence number %d does not follow %d", d.h.seq, d.lastSeq)
	}
	return nil
}

// aLongTimeAgo wakes a blocked Read.
var aLongTimeAgo = time.Unix(1, 0)

// Take finishes the handover of a connection ProveIdleHTTP froze: it wakes
// crypto/tls's Read, waits for net/http to close the tls.Conn (at once), and
// returns the socket, which the caller then owns, and the State to continue
// the session with (Unread: the partial record crypto/tls had read and what
// arrived since). The caller zeroes the State (New does). When ctx ends
// first, or what arrived does not fit a State, the socket is closed and an
// error returned.
func (r *Recorder) Take(ctx context.Context) (net.Conn, *State, error) {
	r.mu.Lock()
	frozen := r.frozen
	r.mu.Unlock()
	if !frozen {
		return nil, nil, errors.New("take: connection not proven")
	}
	fail := func(err error) (net.Conn, *State, error) {
		r.forget()
		r.Conn.Close()
		return nil, nil, &net.OpError{Op: "take", Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: err}
	}
	if err := r.Conn.SetReadDeadline(aLongTimeAgo); err != nil {
		return fail(err)
	}
	select {
	case <-r.released:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	if err := r.Conn.SetDeadline(time.Time{}); err != nil {
		return fail(err)
	}
	r.mu.Lock()
	st := &State{
		Suite:       r.suite.id,
		ReadSecret:  append([]byte(nil), r.in.h.secret...),
		WriteSecret: append([]byte(nil), r.out.h.secret...),
		ReadSeq:     r.in.h.seq,
		WriteSeq:    r.out.h.seq,
	}
	st.Unread = append(append(append(st.Unread, r.in.hdr[:r.in.hn]...), r.in.payload...), r.extra...)
	clear(r.extra)
	r.mu.Unlock()
	if len(st.Unread) > maxUnread {
		st.Zero()
		return fail(fmt.Errorf("%d bytes arrived during the take", len(st.Unread)))
	}
	r.forget()
	return r.Conn, st, nil
}
