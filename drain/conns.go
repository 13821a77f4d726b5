package drain

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/tlsresume"
)

// connInfo is what the tracker knows of one connection.
type connInfo struct {
	remote string
	since  time.Time
	state  http.ConnState
	served int       // responses completed on it
	idle   time.Time // when it last became idle

	tls     *tls.Conn // nil for plain connections
	probed  bool      // its protocol was looked at
	h2      bool      // HTTP/2 (ALPN h2, or h2c): never closed as idle
	pending bool      // TLS, in StateNew when the listener stopped
	// TLS (see tlsListener): when its ClientHello began to be read, and
	// when the server answered it (UnixNano; 0 before). Set by its
	// connection's goroutine, without mu.
	hello, shook atomic.Int64
	g            *h2Conn // HTTP/2 under the drain's two-step shutdown (goaway.go); set before its first request
	// resumed: served by ServeConn, a keep-alive connection of another
	// server (or handed back to us): idle, not new, while in StateNew.
	resumed bool
	// closeAt, when not 0, is when this connection's responses begin to say
	// Connection: close (Server.CloseSpread): nanoseconds since the
	// tracker's epoch, plus one. At 0, tracker.closing decides.
	closeAt atomic.Int64
	// respClose: the request it is serving (HTTP/1) is answered with
	// Connection: close, as decided when it became active. Written by the
	// connection's goroutine under the tracker's lock, so its handler reads
	// it without.
	respClose bool
	// tlsRefused: a TLS connection whose state could not be proven for a
	// handover (TLSHandOver); tlsTaken: one taken for a handover, which
	// net/http has yet to let go; continued: the session a handed-over TLS
	// connection goes on with here (ServeConn).
	tlsRefused bool
	tlsTaken   bool
	continued  *tlsresume.Conn
}

// goneAway: an idle HTTP/2 connection told to go away in two steps, whose
// client acked the first step or has yet to (a client slow to read the
// GOAWAY may still open streams).
func (ci *connInfo) goneAway() bool {
	return ci.g != nil && ci.state == http.StateIdle && ci.served > 0
}

// waiting: idle, waiting for its next request.
func (ci *connInfo) waiting() bool {
	return ci.state == http.StateIdle || (ci.state == http.StateNew && ci.resumed)
}

type connKey struct{}

// tracker follows every connection of an http.Server through ConnContext,
// ConnState and a handler wrapper. Its lock is taken once per state change
// and twice per request, never on the listener's accept path.
type tracker struct {
	mu       sync.Mutex
	conns    map[net.Conn]*connInfo
	hijacked map[net.Conn]time.Time
	changed  chan struct{} // signalled on every change
	draining bool
	closing  atomic.Bool // responses say Connection: close

	completed, keepAlive int // counted after the drain began
	pendingServed        int // pending connections that were then served
	tlsHanded            int // TLS connections handed over with their session
	tlsRefused           int // TLS connections whose state could not be proven
	userState            func(net.Conn, http.ConnState)
	userContext          func(context.Context, net.Conn) context.Context
	epoch                time.Time // of connInfo.closeAt

	linger lingerCloser // closes TLS and HTTP/2 connections lingering (linger.go)

	hs *http.Server // whose HTTP/2 path twoStep enters
	// preamble serializes what writes hs's fields once it may be served
	// (twoStep, ServeTLS's capture) with net/http's reads of them before
	// its first Accept: one http.Server serves the listener and the
	// connections handed over, from several goroutines (see serving).
	preamble  sync.Mutex
	stepped   atomic.Bool // twoStep has run (set under preamble)
	goingAway bool        // HTTP/2 connections get the first step (under mu)
}

func newTracker(hs *http.Server) *tracker {
	return &tracker{
		conns:       make(map[net.Conn]*connInfo),
		hijacked:    make(map[net.Conn]time.Time),
		changed:     make(chan struct{}, 1),
		epoch:       time.Now(),
		userState:   hs.ConnState,
		userContext: hs.ConnContext,
	}
}

// serving runs serveFn (net/http's Serve or ServeTLS, wrapped) on l with
// the preamble lock held until net/http first calls l's Accept, or
// returns: before that, net/http reads the server's TLSNextProto and
// TLSConfig, which twoStep and ServeTLS's capture write.
func (t *tracker) serving(l net.Listener, serveFn func(net.Listener) error) error {
	t.preamble.Lock()
	release := sync.OnceFunc(t.preamble.Unlock)
	defer release()
	return serveFn(preambleListener{l, release})
}

// preambleListener ends net/http's preamble at its first Accept.
type preambleListener struct {
	net.Listener
	release func()
}

func (l preambleListener) Accept() (net.Conn, error) {
	l.release()
	return l.Listener.Accept()
}

// connContext registers a new connection and puts its info in the context.
func (t *tracker) connContext(ctx context.Context, c net.Conn) context.Context {
	t.twoStep(t.hs) // net/http has set up its HTTP/2 by now (in this goroutine's Serve)
	t.mu.Lock()
	ci := t.conns[c] // registered already by ServeConn
	if ci == nil {
		ci = &connInfo{remote: c.RemoteAddr().String(), since: time.Now(), state: http.StateNew}
		ci.tls, _ = c.(*tls.Conn)
		t.conns[c] = ci
		if raw, ok := rawConn(c).(*tlsRaw); ok {
			raw.ci = ci // before net/http's goroutine for c begins the handshake
		}
	}
	t.mu.Unlock()
	if t.userContext != nil {
		ctx = t.userContext(ctx, c)
		if ctx == nil {
			return nil // net/http panics, as it would without us
		}
	}
	return context.WithValue(ctx, connKey{}, ci)
}

// connState follows a connection's state, then calls the user's hook.
func (t *tracker) connState(c net.Conn, s http.ConnState) {
	if f := testHookConnState.Load(); f != nil {
		(*f)(s)
	}
	c = h2Key(c) // net/http's HTTP/2 names the connection it serves
	if dc, ok := c.(*detachConn); ok {
		dc.state(s)
	} else if rec := recorder(c); rec != nil {
		rec.ConnState(s)
	}
	t.probeH2(c, s)
	t.mu.Lock()
	switch s {
	case http.StateClosed:
		delete(t.conns, c)
	case http.StateHijacked:
		delete(t.conns, c)
		t.hijacked[c] = time.Now()
	default:
		if ci := t.conns[c]; ci != nil {
			if s == http.StateIdle && ci.state == http.StateActive && ci.served == 0 {
				ci.h2 = true // net/http's HTTP/2 goes Active, Idle at its preface (h2c too); HTTP/1 only after a response
			}
			ci.state = s
			switch s {
			case http.StateIdle:
				ci.idle = time.Now()
			case http.StateActive:
				// Decided before its handler runs, which decides the same
				// or closes (closeDue only turns true): settleIdle
				// counts on it.
				ci.respClose = t.draining && t.closeDue(ci, time.Now())
			}
		}
	}
	t.mu.Unlock()
	t.signal()
	if t.userState != nil {
		t.userState(c, s)
	}
}

// testHookConnState, if set by a test, runs as a connection changes state,
// before the tracker follows it (atomic: connections of an ended test may
// still change state as the test unsets it).
var testHookConnState atomic.Pointer[func(http.ConnState)]

// signal wakes whoever waits for a change (wait, settleIdle).
func (t *tracker) signal() {
	select {
	case t.changed <- struct{}{}:
	default:
	}
}

// handler counts completed responses around h.
func (t *tracker) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ci, _ := r.Context().Value(connKey{}).(*connInfo)
		withTLSState(r, ci)
		var closeIt bool
		switch {
		case ci == nil:
			closeIt = t.closing.Load()
		case r.ProtoMajor == 1:
			closeIt = ci.respClose || t.closeDue(ci, time.Now())
		default:
			// HTTP/2 in the drain's two steps never says Connection:
			// close: it would make net/http name the last stream as this
			// response begins, and a client can still write one it opened
			// before it read the first GOAWAY. net/http names it at
			// http.Server.Shutdown, once no stream is in flight. (An HTTP/2
			// connection outside the drain's path, ci.g nil, gets
			// net/http's one GOAWAY this way.)
			closeIt = t.closing.Load() && ci.g == nil
		}
		if closeIt {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
		if ci == nil {
			return
		}
		t.mu.Lock()
		if r.ProtoMajor == 2 {
			ci.h2 = true // h2c shows here first
		}
		if ci.pending && ci.served == 0 {
			t.pendingServed++
		}
		if t.draining {
			t.completed++
			if ci.served > 0 {
				t.keepAlive++
			}
		}
		ci.served++
		t.mu.Unlock()
	})
}

// begin marks the drain start and returns the connections busy with a request.
func (t *tracker) begin() (active int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.draining = true
	for _, ci := range t.conns {
		if ci.state == http.StateActive {
			active++
		}
	}
	return active
}

// busy counts, at now, the connections that still have a request to
// serve: in a request (StateActive), a TLS handshake the server is still
// answering (ClientHello read, no answer written), or fresh (see
// connInfo.fresh) within their grace, which ends grace after the later of
// from and the server's answer to their ClientHello. It also returns
// the earliest end of a grace still running (zero if none).
func (t *tracker) busy(now, from time.Time, grace time.Duration) (n int, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, ci := range t.conns {
		if ci.state == http.StateActive {
			n++
			continue
		}
		if ci.goneAway() {
			// Told to go away: its client closes it once its streams are
			// done, and may still write one it opened before it read the
			// GOAWAY (or, slow, not have read it yet). Shutdown's GOAWAY
			// would cut that one.
			end := from
			if ci.idle.After(end) {
				end = ci.idle
			}
			if end = end.Add(grace); end.After(now) {
				n++
				if next.IsZero() || end.Before(next) {
					next = end
				}
			}
			continue
		}
		if !ci.fresh() {
			continue
		}
		if unread(c) {
			n++ // its request (or ClientHello) came: the server's to read
			continue
		}
		shook := ci.shook.Load()
		if ci.hello.Load() != 0 && shook == 0 {
			n++ // the server's to answer: its own slowness is no client's silence
			continue
		}
		end := from
		if shook != 0 && time.Unix(0, shook).After(end) {
			end = time.Unix(0, shook)
		}
		if end = end.Add(grace); end.After(now) {
			n++
			if next.IsZero() || end.Before(next) {
				next = end
			}
		}
	}
	return n, next
}

// wait returns when no connection is busy, or when ctx ends. Connections
// that have sent nothing count as busy for grace only: grace from now, or,
// for a TLS connection whose ClientHello the server is answering, from its
// answer, however slow the server is. An idle HTTP/2 connection told to go
// away counts as busy until grace after it became idle (or from now),
// unless its client closes it first.
func (t *tracker) wait(ctx context.Context, grace time.Duration) error {
	from := time.Now()
	tm := time.NewTimer(grace)
	defer tm.Stop()
	for {
		n, next := t.busy(time.Now(), from, grace)
		if n == 0 {
			return nil
		}
		if !next.IsZero() {
			tm.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
		case <-t.changed:
		}
	}
}

// closeNamed closes the HTTP/2 connections to which net/http has written
// its GOAWAY naming the last stream it serves, and whose every stream is
// done, once the client's TCP has acknowledged every byte written to them:
// nothing more can be served on them, and nothing the client has yet to
// read is lost. Their clients would close them; Go's does not when a
// request it had queued failed at the GOAWAY (its connection stays open
// until the server closes it), and net/http's HTTP/2 server waits 1 s for
// that. It returns how many it closed.
func (t *tracker) closeNamed() int {
	type named struct {
		c net.Conn
		g *h2Conn
	}
	t.mu.Lock()
	var ns []named
	for c, ci := range t.conns {
		if ci.g != nil && ci.state == http.StateIdle && ci.g.named.Load() && !ci.g.closing.Load() {
			ns = append(ns, named{c, ci.g})
		}
	}
	t.mu.Unlock()
	n := 0
	for _, x := range ns {
		if unsent(x.c) == 0 && x.g.closing.CompareAndSwap(false, true) {
			x.g.Close()
			n++
		}
	}
	return n
}

// closeNamedWhile runs closeNamed every namedPoll until the returned func is
// called, which returns how many connections it closed.
func (t *tracker) closeNamedWhile() (stop func() int) {
	done := make(chan struct{})
	n := make(chan int, 1)
	go func() {
		closed := 0
		tk := time.NewTicker(namedPoll)
		defer tk.Stop()
		for {
			closed += t.closeNamed()
			select {
			case <-done:
				n <- closed
				return
			case <-tk.C:
			}
		}
	}()
	return func() int {
		close(done)
		return <-n
	}
}

// namedPoll is how often Shutdown looks for HTTP/2 connections that are done
// (closeNamed): their GOAWAY written, they wait for their acknowledgement.
const namedPoll = 5 * time.Millisecond

// unsent says whether bytes written to c have yet to be acknowledged by its
// peer. Not knowing (an error) is true: nothing is closed on it.
func unsent(c net.Conn) int {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return 1
	}
	n, err := linux.Unsent(sc)
	if err != nil {
		return 1
	}
	return n
}

// closeSilent closes the connections that never sent a request (a client's
// spare connection); net/http's Shutdown would wait 5 s for each. One whose
// request has just come (unread) is left to net/http, which serves it.
func (t *tracker) closeSilent() int {
	t.mu.Lock()
	var silent []net.Conn
	for c, ci := range t.conns {
		if ci.state == http.StateNew && !ci.resumed && !unread(c) {
			silent = append(silent, c)
		}
	}
	t.mu.Unlock()
	for _, c := range silent {
		c.Close()
	}
	return len(silent)
}

// unread says whether bytes wait in c's receive queue that net/http has not
// read: a connection in StateNew with a request (or a ClientHello) there is
// no silent client, only one the server is slow to read, as an overloaded
// server's starved goroutine is. Not knowing (an error: the socket is
// closed) is false.
func unread(c net.Conn) bool {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return false
	}
	n, err := linux.Unread(sc)
	return err == nil && n > 0
}

// closeDue reports whether a response of ci begun at now says Connection:
// close: from its own time if the spread gave it one, else once closing is
// set. It only ever turns from false to true.
func (t *tracker) closeDue(ci *connInfo, now time.Time) bool {
	if at := ci.closeAt.Load(); at != 0 {
		return int64(now.Sub(t.epoch)) >= at-1
	}
	return t.closing.Load()
}

// closeTime is when ci's responses begin to say Connection: close, for a
// connection the spread did not schedule: from.
func (t *tracker) closeTime(ci *connInfo, from time.Time) time.Time {
	if at := ci.closeAt.Load(); at != 0 {
		return t.epoch.Add(time.Duration(at - 1))
	}
	return from
}

// spreadCloses gives the HTTP/1 connections open now (HTTP/2 ones are told
// to go away instead, spread alike: tracker.goAway) their times to begin closing, evenly over spread from
// start: connection i of n, oldest first, at start + i*spread/n.
func (t *tracker) spreadCloses(start time.Time, spread time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cis := make([]*connInfo, 0, len(t.conns))
	for _, ci := range t.conns {
		if !ci.h2 {
			cis = append(cis, ci)
		}
	}
	oldestFirst(cis)
	for i, ci := range cis {
		at := start.Add(spread * time.Duration(i) / time.Duration(len(cis)))
		ci.closeAt.Store(int64(at.Sub(t.epoch)) + 1)
	}
}

// oldestFirst sorts cis by their accept time (then remote address), the
// order CloseSpread tells them to leave in.
func oldestFirst(cis []*connInfo) {
	slices.SortFunc(cis, func(a, b *connInfo) int {
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return strings.Compare(a.remote, b.remote)
	})
}

// settleIdle ends the HTTP/1 keep-alive connections without racing their
// clients. With spread, the connections open now get times spread evenly
// over it (spreadCloses) and are served as before until theirs; the others,
// and all without spread, from now on. A response begun from a connection's
// time on says Connection: close, after which net/http closes it. One that
// waits for its next request at its time, or later (its last response, begun
// before, said keep-alive), has until IdleGrace (grace) after its time, or
// after it became idle if later, to send one more request; a response still
// in flight that says keep-alive is waited for. It returns when no
// connection is before its time, idle or finishing a keep-alive response, or
// when ctx ends; it closes the idle connections whose grace is over, and at
// ctx's end those still idle, and returns how many it closed, and of those
// the TLS ones.
func (t *tracker) settleIdle(ctx context.Context, grace, spread time.Duration) (closed, closedTLS int) {
	start := time.Now()
	if spread > 0 {
		t.spreadCloses(start, spread)
	}
	t.closing.Store(true)
	tm := time.NewTimer(time.Hour)
	defer tm.Stop()
	for {
		now := time.Now()
		due, dueTLS, left, next := t.dueIdle(now, start, grace)
		for _, c := range due {
			c.Close()
		}
		closed, closedTLS = closed+len(due), closedTLS+dueTLS
		if left == 0 {
			return closed, closedTLS
		}
		var timeout <-chan time.Time // none: only a change can settle it
		if !next.IsZero() {
			tm.Reset(time.Until(next))
			timeout = tm.C
		}
		select {
		case <-ctx.Done():
			n, nTLS := t.idle(true)
			return closed + n, closedTLS + nTLS
		case <-timeout:
		case <-t.changed:
			// At most one look per millisecond: under load every
			// request changes a state twice.
			time.Sleep(time.Until(now.Add(time.Millisecond)))
		}
	}
}

// dueIdle looks at the HTTP/1 connections at now: it returns those idle
// whose grace is over (see settleIdle), and how many of them are TLS; how
// many are left to settle (before their time, idle within their grace, or
// busy with a response that says keep-alive); and the earliest time or end
// of a grace to come, if any.
func (t *tracker) dueIdle(now, from time.Time, grace time.Duration) (due []net.Conn, dueTLS, left int, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	later := func(at time.Time) {
		left++
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for c, ci := range t.conns {
		if ci.h2 {
			continue // told to go away, never closed bare
		}
		at := t.closeTime(ci, from)
		switch {
		case ci.waiting():
			end := at
			if ci.idle.After(end) {
				end = ci.idle
			}
			if end = end.Add(grace); now.Before(end) {
				later(end)
				continue
			}
			due = append(due, c)
			if ci.tls != nil || ci.continued != nil {
				dueTLS++
			}
		case ci.state == http.StateActive && !ci.respClose:
			left++ // idle after its response, which says keep-alive
		case now.Before(at):
			later(at) // served as before until then
		}
	}
	return due, dueTLS, left, next
}

// idle counts the idle connections, and of those the TLS ones, and, when
// doClose, closes them.
func (t *tracker) idle(doClose bool) (n, tlsConns int) {
	var idle []net.Conn
	t.mu.Lock()
	for c, ci := range t.conns {
		if ci.waiting() && !ci.h2 { // HTTP/2: told to go away, never closed bare
			idle = append(idle, c)
			if ci.tls != nil || ci.continued != nil {
				tlsConns++
			}
		}
	}
	t.mu.Unlock()
	if doClose {
		for _, c := range idle {
			c.Close()
		}
	}
	return len(idle), tlsConns
}

// hijackedConns returns the hijacked connections that are still open.
func (t *tracker) hijackedConns() []net.Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []net.Conn
	for c := range t.hijacked {
		if open(c) {
			out = append(out, c)
		} else {
			delete(t.hijacked, c)
		}
	}
	return out
}

// leftovers names the connections still open, hijacked ones included.
func (t *tracker) leftovers(now time.Time) []ForcedConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []ForcedConn
	for _, ci := range t.conns {
		out = append(out, ForcedConn{Remote: ci.remote, State: ci.state.String(), Age: now.Sub(ci.since)})
	}
	for c, at := range t.hijacked {
		if open(c) {
			out = append(out, ForcedConn{Remote: c.RemoteAddr().String(), State: http.StateHijacked.String(), Age: now.Sub(at)})
		}
	}
	return out
}

func (t *tracker) counts() (completed, keepAlive int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.completed, t.keepAlive
}

// open reports whether c is still open (its fd can be reached).
func open(c net.Conn) bool {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(uintptr) {}) == nil
}
