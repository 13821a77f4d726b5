package drain

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The two-step shutdown of an HTTP/2 connection (RFC 9113 section 6.8).
//
// net/http's HTTP/2 server sends one GOAWAY naming the last stream it has
// read; a stream the client opened while that frame was on its way is above
// it and is ignored, unanswered: a client that does not retry (h2load, a POST)
// loses it. So the drain sends the first step itself: GOAWAY with the largest
// stream id (the client stops opening streams and loses none) and a PING; the
// PING's ack, read back, shows the client has seen the GOAWAY and every
// stream it opened before is read. Only then, once the client has opened no
// stream for settleQuiet, may net/http send its own GOAWAY, whose last stream
// id now covers them all.
//
// A client refuses, itself, the streams it has queued but not sent when it
// reads a GOAWAY (nghttp2 does; h2load counts them as failed), and it queues
// one whenever a response ends. So the first step is preceded by a probe: a
// PING sent alone while net/http's frames are held back. Its ack shows the
// client has read every response written before it and sent the streams
// those made it open; nothing ends while the GOAWAY is on its way, so it
// finds nothing queued.
//
// net/http has no API for this, but it serves an HTTP/2 connection through
// Server.TLSNextProto, and its "unencrypted_http2" entry serves any net.Conn
// whose preface has been read. The drain puts itself in that path: for ALPN
// h2 it reads the preface from the *tls.Conn and passes net/http an h2Conn
// (which reports the TLS state, so Request.TLS and HTTP/2's TLS checks stay);
// for h2c it wraps the connection net/http passes. An h2Conn follows the
// frames both ways, so that its own frames go in between two of net/http's
// and its PING's ack is seen.

const (
	nextProtoH2      = "h2"
	nextProtoH2Clear = "unencrypted_http2" // net/http's key for a connection whose preface is read
	h2Preface        = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	h2PrefaceTimeout = 10 * time.Second // as net/http's HTTP/2 server
	// probeWait bounds how long net/http's frames are held for the probes;
	// a client that does not answer in time gets the first step anyway.
	probeWait = 250 * time.Millisecond
	// probeQuiet: after the first probe's ack, net/http's frames stay held
	// until the client has opened no stream for probeQuiet and for one
	// whole probe's round trip (see awaitQuiet).
	probeQuiet = 20 * time.Millisecond
	// After the first step's ack, net/http may name the last stream once the
	// client has opened none for settleQuiet (at most settleMax after the
	// ack): Go's Transport can write one stream after its ack (one that took
	// its id before it read the GOAWAY).
	settleQuiet = 50 * time.Millisecond
	settleMax   = 250 * time.Millisecond

	frameHeaderLen         = 9
	frameHeaders           = 1
	framePing, frameGoAway = 6, 7
	flagAck                = 1
	maxStreamID            = 1<<31 - 1
)

// twoStep installs the drain in hs's HTTP/2 path, once hs has set it up
// (from ConnContext, before the first connection is served). It leaves
// alone a server without net/http's entries (HTTP/2 off, or TLSNextProto
// set by the user without them). It writes hs.TLSNextProto under the
// preamble lock: another goroutine may be in net/http's ServeTLS, which
// reads it before its first Accept (see serving).
func (t *tracker) twoStep(hs *http.Server) {
	if t.stepped.Load() {
		return
	}
	t.preamble.Lock()
	defer t.preamble.Unlock()
	if t.stepped.Load() {
		return
	}
	defer t.stepped.Store(true)
	serveH2, ok := hs.TLSNextProto[nextProtoH2Clear]
	if !ok {
		return
	}
	if _, ok := hs.TLSNextProto[nextProtoH2]; ok {
		hs.TLSNextProto[nextProtoH2] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
			if err := readPreface(c); err != nil {
				c.Close() // not HTTP/2: net/http's server would close it too
				return
			}
			g := t.newH2Conn(c, c, true)
			serveH2(hs, tls.Client(handTo{g.net()}, nil), h)
		}
	}
	hs.TLSNextProto[nextProtoH2Clear] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			serveH2(hs, c, h) // not net/http's: let it say why
			return
		}
		nc := u.UnencryptedNetConn()
		g := t.newH2Conn(nc, nc, false)
		serveH2(hs, tls.Client(handTo{g.net()}, nil), h)
	}
}

// h2Key is the connection net/http's hooks name c by: c itself unless c is
// an h2Conn.
func h2Key(c net.Conn) net.Conn {
	switch g := c.(type) {
	case *h2Conn:
		return g.key
	case tlsH2Conn:
		return g.key
	}
	return c
}

// goAway begins the two-step shutdown of every HTTP/2 connection, and of
// those that come later, and returns those it began it on. With spread,
// connection i of the n open now (oldest first) gets its first step at
// i*spread/n from now (Server.CloseSpread), and is served as before until
// then.
func (t *tracker) goAway(spread time.Duration) (gs []*h2Conn) {
	t.mu.Lock()
	t.goingAway = true
	var cis []*connInfo
	for _, ci := range t.conns {
		if ci.g != nil {
			cis = append(cis, ci)
		}
	}
	oldestFirst(cis)
	for _, ci := range cis {
		gs = append(gs, ci.g)
	}
	t.mu.Unlock()
	for i, g := range gs {
		if at := spread * time.Duration(i) / time.Duration(len(gs)); at > 0 {
			time.AfterFunc(at, g.goAway)
		} else {
			g.goAway()
		}
	}
	return gs
}

// h2Open counts the HTTP/2 connections open (some may not be in the drain's
// path: see twoStep).
func (t *tracker) h2Open() (open int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ci := range t.conns {
		if ci.h2 {
			open++
		}
	}
	return open
}

// awaitGoAway waits, within bound and ctx, for the first step's acks of gs,
// and counts those acked and those not (or closed first).
func awaitGoAway(ctx context.Context, gs []*h2Conn, bound time.Duration) (acked, unacked int) {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for _, g := range gs {
		select {
		case <-g.acked:
		case <-ctx.Done():
		}
		if g.pingAcked.Load() {
			acked++
		} else {
			unacked++
		}
	}
	return acked, unacked
}

// readPreface reads the client's HTTP/2 preface from c.
func readPreface(c *tls.Conn) error {
	c.SetReadDeadline(time.Now().Add(h2PrefaceTimeout))
	var b [len(h2Preface)]byte
	_, err := io.ReadFull(c, b[:])
	c.SetReadDeadline(time.Time{})
	if err == nil && string(b[:]) != h2Preface {
		err = errBadPreface
	}
	return err
}

type prefaceError struct{}

func (prefaceError) Error() string { return "drain: not an HTTP/2 client preface" }

var errBadPreface error = prefaceError{}

// handTo is what net/http's "unencrypted_http2" entry unwraps.
type handTo struct{ net.Conn }

func (h handTo) UnencryptedNetConn() net.Conn { return h.Conn }

// newH2Conn wraps c, the connection net/http names key in its hooks, and
// registers it with key's connInfo; if the drain has begun its first step,
// the connection gets it at once.
func (t *tracker) newH2Conn(c, key net.Conn, isTLS bool) *h2Conn {
	g := &h2Conn{Conn: c, key: key, linger: &t.linger, acked: make(chan struct{}), probeAck: make(chan struct{}, 1), ended: make(chan struct{})}
	if isTLS {
		g.tls = c.(*tls.Conn)
	}
	rand.Read(g.token[:])
	rand.Read(g.probe[:])
	t.mu.Lock()
	if ci := t.conns[key]; ci != nil {
		ci.h2, ci.g = true, g
	}
	going := t.goingAway
	t.mu.Unlock()
	if going {
		g.goAway()
	}
	return g
}

// h2Conn is an HTTP/2 connection under net/http's HTTP/2 server, followed
// frame by frame.
type h2Conn struct {
	net.Conn          // the connection: a *tls.Conn past its preface, or plain past its preface
	key      net.Conn // what net/http's hooks name it by
	linger   *lingerCloser
	tls      *tls.Conn
	token    [8]byte // the first step's PING payload
	probe    [8]byte // the probes' PING payload, but for the last byte (probeSeq's)
	rounds   int     // probes acked (under wmu)

	wmu     sync.Mutex
	out     frameCursor // what net/http has written
	wrote   bool        // net/http's first frame (SETTINGS) is out
	pending []byte      // the first step, to write at the next frame boundary
	probed  bool        // the probe is written
	sent    bool        // the first step is written, or moot (net/http's GOAWAY came first)

	named   atomic.Bool // net/http has written its GOAWAY, naming the last stream it serves
	closing atomic.Bool // the drain closes it (tracker.closeNamed)
	closed  atomic.Bool // Close has run

	in        frameCursor  // what the client sent (read by net/http's one reader)
	opened    atomic.Int64 // UnixNano of the client's last HEADERS
	pingAcked atomic.Bool
	ackOnce   sync.Once
	acked     chan struct{} // closed once the PING's ack has settled, or when the wait is moot
	probeAck  chan struct{} // signalled at the ack of the probe awaited
	probeSeq  atomic.Uint32 // the last byte of the probe awaited
	endOnce   sync.Once
	ended     chan struct{} // closed when the connection ends: no ack will come
}

// tlsH2Conn is an h2Conn over TLS: net/http's HTTP/2 server reads its TLS
// state (Request.TLS, and its own checks of version and cipher suite).
type tlsH2Conn struct{ *h2Conn }

func (c tlsH2Conn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// net is what net/http serves: with the TLS state when under TLS.
func (c *h2Conn) net() net.Conn {
	if c.tls != nil {
		return tlsH2Conn{c}
	}
	return c
}

// goAway sends the first step (GOAWAY with the largest stream id and a
// PING), once, after the probe: at once if net/http is between frames, else
// at the end of the frame it is writing.
func (c *h2Conn) goAway() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.sent || c.pending != nil {
		return
	}
	c.pending = firstStep(c.token)
	if testHookGoAway != nil {
		testHookGoAway(c.Conn.RemoteAddr().String())
	}
	go c.flushStep() // not under the caller: a client that does not read would block it
}

// flushStep writes the pending first step if net/http is between frames.
func (c *h2Conn) flushStep() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.writeStepLocked()
}

// writeStepLocked writes the probe and, once it is acked (or after
// probeWait), the pending first step, with wmu held (net/http's frames wait),
// if net/http is between frames and has written its SETTINGS (a server's
// first frame).
func (c *h2Conn) writeStepLocked() {
	if c.pending == nil || !c.wrote || !c.out.between() {
		return
	}
	if !c.probed {
		c.probed = true
		if err := c.awaitQuiet(); err != nil {
			c.pending, c.sent = nil, true
			c.done() // the connection is failing: net/http will see it too
			return
		}
	}
	p := c.pending
	c.pending, c.sent = nil, true
	if _, err := c.Conn.Write(p); err != nil {
		c.done()
	}
	if testHookFirstStep != nil {
		testHookFirstStep(c.Conn.RemoteAddr().String(), c.rounds)
	}
}

// testHookGoAway, if set by a test, runs when a connection is given its
// first step (written once the probes allow), with the client's address.
var testHookGoAway func(remote string)

// testHookFirstStep, if set by a test, runs once the first step is
// written to the client at remote, with how many probes were acked.
var testHookFirstStep func(remote string, rounds int)

// awaitQuiet writes probes, PINGs alone, with net/http's frames held (wmu),
// until the client, having acked one, has opened no stream for probeQuiet
// and during a whole probe's round trip, or until probeWait has passed.
//
// An ack shows that the client's reader has read every response written
// before the probe; not that the requests those responses woke have opened
// their streams. Go's client (1.26, h2_bundle.go) reserves a stream on the
// connection it chooses (ReserveNewRequest), then, in a goroutine of the
// request's own, gives the stream its id (awaitOpenSlotForStreamLocked); if
// its reader handles a GOAWAY in between, the request fails unsent ("cannot
// rewind body after connection loss" for a body without GetBody,
// golang/go#62450). With every response held, nothing wakes a new request
// on this connection; those already woken open their streams, and the
// quiet shows they have. A client starved of CPU answers slowly, so the
// round without a new stream lasts as long as its starvation.
func (c *h2Conn) awaitQuiet() error {
	start := time.Now()
	end := start.Add(probeWait)
	t := time.NewTimer(probeWait)
	defer t.Stop()
	var firstAck time.Time
	for {
		sent := time.Now()
		ping := c.probe
		ping[7] = byte(c.probeSeq.Add(1))
		if _, err := c.Conn.Write(appendFrame(nil, framePing, 0, ping[:])); err != nil {
			return err
		}
		select {
		case <-c.probeAck:
		case <-c.ended:
			return nil
		case <-t.C:
			return nil
		}
		c.rounds++
		now := time.Now()
		if firstAck.IsZero() {
			firstAck = now
		}
		last := firstAck
		if o := time.Unix(0, c.opened.Load()); o.After(last) {
			last = o
		}
		if !last.After(sent) && now.Sub(last) >= probeQuiet {
			return nil // quiet for a round trip, and for probeQuiet
		}
		// Not before probeQuiet without a stream: a fast client is not
		// probed in a busy loop.
		if d := min(probeQuiet-now.Sub(last), end.Sub(now)); d > 0 {
			select {
			case <-time.After(d):
			case <-c.ended:
				return nil
			}
		}
		if !time.Now().Before(end) {
			return nil
		}
	}
}

// firstStep is GOAWAY(2^31-1, NO_ERROR) and PING(token).
func firstStep(token [8]byte) []byte {
	b := make([]byte, 0, 2*(frameHeaderLen+8))
	b = appendFrame(b, frameGoAway, 0, binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, maxStreamID), 0))
	return appendFrame(b, framePing, 0, token[:])
}

func appendFrame(b []byte, typ, flags byte, payload []byte) []byte {
	n := len(payload)
	b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, flags, 0, 0, 0, 0)
	return append(b, payload...)
}

// done marks the first step over: acked, moot, or failed.
func (c *h2Conn) done() { c.ackOnce.Do(func() { close(c.acked) }) }

// probeDone ends the wait for probes' acks: the connection has ended.
func (c *h2Conn) probeDone() { c.endOnce.Do(func() { close(c.ended) }) }

// Write writes net/http's frames, with the first step in between two of them
// when it is pending.
func (c *h2Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	written := 0
	for len(p) > 0 {
		c.writeStepLocked()
		k := len(p)
		if c.pending != nil {
			k = c.out.frameEnd(p) // stop at the end of this frame
		}
		n, err := c.Conn.Write(p[:k])
		c.out.advance(p[:n], c.sawOut)
		if c.out.between() && n > 0 {
			c.wrote = true
		}
		written += n
		p = p[n:]
		if err != nil {
			return written, err
		}
	}
	c.writeStepLocked() // between frames now: the first step need not wait for the next Write
	return written, nil
}

// sawOut notes a frame net/http writes: its own GOAWAY names the last stream
// it serves, and, before ours, makes ours moot (a later GOAWAY must not raise
// the last stream id).
func (c *h2Conn) sawOut(typ, _ byte, _ []byte) {
	if typ != frameGoAway {
		return
	}
	c.named.Store(true)
	if !c.sent {
		c.pending, c.sent = nil, true
		c.done()
	}
}

// Read reads for net/http's HTTP/2 server and watches for the PING's ack.
func (c *h2Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.in.advance(p[:n], c.sawIn)
	if err != nil {
		c.probeDone() // no ack will come
	}
	return n, err
}

func (c *h2Conn) sawIn(typ, flags byte, payload []byte) {
	if typ == frameHeaders {
		c.opened.Store(time.Now().UnixNano())
	}
	if typ != framePing || flags&flagAck == 0 {
		return
	}
	switch {
	case len(payload) == 8 && string(payload[:7]) == string(c.probe[:7]):
		if payload[7] == byte(c.probeSeq.Load()) {
			select {
			case c.probeAck <- struct{}{}:
			default:
			}
		}
	case string(payload) == string(c.token[:]):
		if !c.pingAcked.Swap(true) {
			c.settle(time.Now())
		}
	}
}

// settle ends the first step once the client, having acked it at ack, has
// opened no stream for settleQuiet, or at ack+settleMax.
func (c *h2Conn) settle(ack time.Time) {
	var check func()
	check = func() {
		quiet := ack
		if o := time.Unix(0, c.opened.Load()); o.After(quiet) {
			quiet = o
		}
		now := time.Now()
		left := settleQuiet - now.Sub(quiet)
		if left <= 0 || now.Sub(ack) >= settleMax {
			c.done()
			return
		}
		time.AfterFunc(min(left, settleMax-now.Sub(ack)), check)
	}
	time.AfterFunc(settleQuiet, check)
}

// Close closes the connection, lingering (linger.go: under TLS, its
// tlsRaw does), once, and ends the waits for acks.
func (c *h2Conn) Close() error {
	c.done()
	c.probeDone()
	if !c.closed.CompareAndSwap(false, true) {
		return net.ErrClosed
	}
	if c.tls != nil {
		return c.Conn.Close()
	}
	c.linger.close(c.Conn)
	return nil
}

// frameCursor follows a stream of HTTP/2 frames cut anywhere.
type frameCursor struct {
	hdr  [frameHeaderLen]byte
	nhdr int // header bytes seen of the current frame
	left int // payload bytes left of the current frame
	// The payload of a frame of up to 8 bytes (PING, GOAWAY's start), for
	// the callback.
	small  [8]byte
	nsmall int
}

// between reports whether the cursor is between two frames.
func (f *frameCursor) between() bool { return f.nhdr == 0 && f.left == 0 }

// frameEnd returns how many bytes of p end the current frame (all of p if it
// does not end there; a whole frame if between frames).
func (f *frameCursor) frameEnd(p []byte) int {
	g := *f
	k := 0
	for k < len(p) {
		k += g.step(p[k:], nil)
		if g.between() {
			return k
		}
	}
	return k
}

// advance follows p, calling saw for each frame as its payload's first 8
// bytes are known (at once for a frame with no payload).
func (f *frameCursor) advance(p []byte, saw func(typ, flags byte, payload []byte)) {
	for len(p) > 0 {
		p = p[f.step(p, saw):]
	}
}

// step consumes up to the end of the current header or payload and returns
// how many bytes of p it took (at least 1).
func (f *frameCursor) step(p []byte, saw func(typ, flags byte, payload []byte)) int {
	if f.nhdr < frameHeaderLen {
		n := copy(f.hdr[f.nhdr:], p)
		f.nhdr += n
		if f.nhdr == frameHeaderLen {
			f.left = int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
			f.nsmall = 0
			if f.left == 0 {
				f.end(saw)
			}
		}
		return n
	}
	n := min(len(p), f.left)
	if f.nsmall < len(f.small) {
		f.nsmall += copy(f.small[f.nsmall:], p[:n])
	}
	f.left -= n
	if f.left == 0 {
		f.end(saw)
	}
	return n
}

func (f *frameCursor) end(saw func(typ, flags byte, payload []byte)) {
	if saw != nil {
		saw(f.hdr[3], f.hdr[4], f.small[:f.nsmall])
	}
	f.nhdr, f.left = 0, 0
}
