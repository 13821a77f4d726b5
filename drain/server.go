package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/runonce"
	"go.uber.org/zap"
)

// Server drains an *http.Server without losing a request that
// http.Server.Shutdown alone would drop (golang/go#65802: once Shutdown has
// begun, a request read afterwards is dropped without a reply).
//
// Serve installs hooks on HTTP (ConnContext, ConnState and Handler are
// wrapped, the originals still run): set those fields before Serve and do not
// change them afterwards. One Server serves one listener.
type Server struct {
	// HTTP is the server to drain. Required.
	HTTP *http.Server
	// Delay is how long Shutdown keeps serving after readiness fails, so load
	// balancers and Kubernetes endpoints notice. Zero means no delay.
	Delay time.Duration
	// IdleGrace: once the listener has stopped, every keep-alive connection
	// that is idle (or finishing a response begun before the drain) gets up
	// to IdleGrace to send one more request, answered with Connection:
	// close, so that a client that sends does not race the close. Those
	// still idle at its end are closed (HTTPReport.IdleClosed): a client
	// sending at that moment sees its request fail, so IdleGrace should
	// exceed the clients' interval between requests. Default 1 s.
	IdleGrace time.Duration
	// CloseSpread, if positive, spreads the end of the keep-alive
	// connections (HTTP/1 ones not handed over, and HTTP/2 ones) over this
	// window, instead of telling all of them at once, as HAProxy's
	// close-spread-time does. Once the listener has stopped, connection i
	// of the n open then (oldest first; HTTP/1 and HTTP/2 each spread
	// alike) is served as before until i*CloseSpread/n, after which its
	// responses say Connection: close (one idle at its time gets IdleGrace
	// from then), or, over HTTP/2, it is told to go away. Without it, every
	// client of a restarted server reconnects in the same few milliseconds,
	// and over TLS each new connection costs a full handshake (about 0.7 ms
	// of CPU for client and server together with ECDSA P-256 and TLS 1.3,
	// see BENCHMARKS.md): a burst that the successor, or the siblings,
	// serve with a latency of up to n handshakes' worth. The cost: the
	// drain, and so the process, lasts up to CloseSpread longer, and keeps
	// serving meanwhile; and over HTTP/2, Go's client fails more of the
	// requests it had queued, unsent, on a connection when its GOAWAY
	// arrives (it sends a GET again on another connection, and fails a POST
	// whose body it cannot rewind: golang/go#62450): in BENCHMARKS.md's
	// runs, 500 ms doubled them. A ctx deadline nearer than twice the window
	// compresses it to half the time left (HTTPReport.CloseSpread says the
	// window used). Zero (the default) tells every connection at once, once
	// the listener has stopped.
	CloseSpread time.Duration
	// NewConnGrace is how long Shutdown waits, once the listener has
	// stopped, for the first request of connections that were accepted but
	// have sent nothing; then it closes them (a client's spare connection
	// would otherwise hold net/http's Shutdown for 5 s). A connection whose
	// request (or ClientHello) waits unread in its receive queue has sent
	// something: it waits, bounded by Shutdown's context, for net/http to
	// read it (on an overloaded server its goroutine may not have run yet).
	// For a TLS connection whose ClientHello the server is still answering,
	// the grace runs from the answer (see "TLS and HTTP/2" in the package
	// doc). Default 1 s.
	NewConnGrace time.Duration
	// Hijacked, if set, is called once for every hijacked connection (for
	// example a WebSocket) still open when the listener has stopped, so its
	// owner closes it before the deadline. It must not block. Connections
	// still open at the deadline are closed and named in the report.
	Hijacked func(net.Conn)
	// HandOver, if set, is offered the plain HTTP/1.1 connections at
	// Shutdown, to pass to a successor (for example with a
	// handoff.Upgrader's PassConns; the successor serves them with
	// ServeConn) instead of closing them: the client notices nothing. Once
	// the listener has stopped, each connection is taken from net/http as
	// soon as it waits for its next request (idle ones at once, busy ones
	// after their response), with the bytes it had read but not consumed,
	// and offered in batches. HandOver returns how many of conns it took
	// (conns[:taken] are gone; the rest are served here again) and an error
	// when it took fewer. Shutdown first calls HandOver(ctx, nil): an error
	// then means nobody takes connections now, and the drain goes the usual
	// way. HTTP/2 connections are never handed over (their state lives in
	// net/http), nor TLS ones unless TLSHandOver (see there): ServeTLS
	// hands over only with it.
	HandOver func(ctx context.Context, conns []Detached) (taken int, err error)
	// HandOverBatch is how many connections are taken from net/http and
	// offered to HandOver at once; default 16. A request that arrives on a
	// connection once it is taken waits until the successor serves it, that
	// is until its whole batch was passed and acknowledged; the connections
	// not taken yet are served here meanwhile. Larger batches make the
	// handover shorter and each connection's transit longer.
	HandOverBatch int
	// TLSHandOver, with HandOver, makes ServeTLS hand its idle HTTP/1.1
	// connections over too when they run TLS 1.3 and their record-layer
	// state is proven exactly (package tlsresume): the successor's
	// ServeConn continues the session, and the client sees neither a close
	// nor a handshake. ServeTLS then sets HTTP.TLSConfig's KeyLogWriter
	// (chained before the one it had). TLS 1.2 connections, those with
	// client certificates, those in ChaCha20-Poly1305 unless the program
	// imports github.com/zerodrop/zerodrop/tlsresume/chacha (a module of
	// its own, for x/crypto), and any whose state cannot be proven are
	// closed as without it (HTTPReport.TLSNotHandedOver counts them); HTTP/2 keeps
	// its two-step GOAWAY (its HPACK and stream state cannot travel). A
	// session ServeConn continues is handed over again at the next
	// Shutdown with HandOver set, like a plain connection. Successors must
	// be of this version or later (older ones do not recognise the state).
	TLSHandOver bool
	// HandOverGrace bounds how long Shutdown waits for busy connections to
	// finish their response so they can be handed over; those still busy
	// then get the usual treatment (IdleGrace). Default 5 s.
	HandOverGrace time.Duration
	// Listener configures the Listener Serve wraps a plain listener in. Its
	// Logger is ignored: the Server logs the whole report once.
	Listener Options
	// Logger receives the report once per Shutdown; nil means no logging.
	Logger *zap.Logger
	// OnReport, if set, is called once per Shutdown with the report (HTTP
	// included), after it is logged (for example stats.Hub.DrainHook). It
	// must not block and must not change the report. Listener.OnReport is
	// ignored, like Listener.Logger.
	OnReport func(*Report)

	setup    sync.Once
	t        *tracker
	draining atomic.Bool
	mu       sync.Mutex
	l        *Listener
	served   chan struct{} // closed when HTTP.Serve has returned
	taken    chan struct{} // closed when Serve has its listener or refused it (see Serving)
	takeOnce sync.Once
	shut     runonce.Call[*Report] // the one drain: callers get copies of its report

	// ServeConn's (handover.go), under mu.
	cl        *connListener
	clServed  chan struct{} // closed when HTTP.Serve(cl) has returned
	connsOver bool          // ServeConn refuses
	received  int           // connections ServeConn gave net/http
}

// HTTPReport is what Server.Shutdown did to the HTTP connections.
type HTTPReport struct {
	InFlightAtStart    int `json:"in_flight_at_start"`  // connections inside a request when the drain began
	Completed          int `json:"completed"`           // responses completed after the drain began
	KeepAliveResponses int `json:"keepalive_responses"` // of those, on connections that had served a request before
	HijackedNotified   int `json:"hijacked_notified"`   // hijacked connections given to the Hijacked callback
	SilentClosed       int `json:"silent_closed"`       // connections closed after NewConnGrace without a request
	TLSPending         int `json:"tls_pending"`         // TLS connections whose handshake or first request was still to come when the listener stopped
	TLSPendingServed   int `json:"tls_pending_served"`  // of those, served a request
	HTTP2              int `json:"http2"`               // HTTP/2 connections open when the listener began to stop (or after, if more), each told to go away
	// GoAwayAcked is the HTTP/2 connections open when the listener began to
	// stop whose client acknowledged the first step of the shutdown (GOAWAY
	// with the largest stream id and a PING) within NewConnGrace: none of
	// their streams was refused. GoAwayUnacked is those whose ack did not
	// come in time, or that closed first (h2load closes a connection at its
	// first GOAWAY).
	GoAwayAcked   int `json:"goaway_acked"`
	GoAwayUnacked int `json:"goaway_unacked"`
	// GoAwayClosed is the HTTP/2 connections the drain closed itself once
	// net/http's GOAWAY had named their last stream, every stream was done
	// and the client had acknowledged every byte: their clients kept them
	// open (Go's does when a request it had queued fails at the GOAWAY),
	// and net/http would have waited 1 s more.
	GoAwayClosed int `json:"goaway_closed"`
	// IdleClosed is the keep-alive connections closed while idle, after
	// IdleGrace: each is a request its client may have had in flight (sent
	// as the close reached it), which it sees fail (EOF or reset).
	IdleClosed int `json:"idle_closed"`
	// IdleClosedTLS is how many of IdleClosed were TLS connections, which
	// cannot be handed over.
	IdleClosedTLS int `json:"idle_closed_tls"`
	// CloseSpread is the window over which the keep-alive connections
	// were told to close or go away (Server.CloseSpread, compressed by the
	// ctx's deadline); zero when all were told at once.
	CloseSpread time.Duration `json:"close_spread_ns,omitempty"`
	// HandedOver is the connections HandOver took; HandOverReturned those
	// it was offered and did not take (they were served here again);
	// Received the connections ServeConn served in this Server's life.
	HandedOver       int `json:"handed_over"`
	HandOverReturned int `json:"handover_returned"`
	// HandedOverTLS is how many of HandedOver were TLS connections, passed
	// with their session (TLSHandOver); TLSNotHandedOver the TLS
	// connections whose state could not be proven, left to IdleGrace.
	HandedOverTLS    int           `json:"handed_over_tls"`
	TLSNotHandedOver int           `json:"tls_not_handed_over"`
	Received         int           `json:"received"`
	HandOverError    string        `json:"handover_error,omitempty"` // why handing over stopped early
	Forced           []ForcedConn  `json:"forced,omitempty"`         // connections closed at the deadline
	ForcedRequests   int           `json:"forced_requests"`          // of those, inside a request
	DelayTook        time.Duration `json:"delay_ns"`
	StopTook         time.Duration `json:"stop_ns"` // the listener stop, until Accept took every drained connection
	WaitTook         time.Duration `json:"wait_ns"` // serving the connections accepted before the stop
	Took             time.Duration `json:"took_ns"` // the whole Shutdown
}

// ForcedConn is a connection closed at the deadline.
type ForcedConn struct {
	Remote string        `json:"remote"`
	State  string        `json:"state"` // http.ConnState when closed
	Age    time.Duration `json:"age_ns"`
}

// Ready returns a readiness handler: 200 while serving, 503 once Shutdown has
// begun.
func (s *Server) Ready() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
}

// Serving returns a channel closed once Serve or ServeTLS has its listener
// (a Shutdown from then on drains it and reports it) or has refused it. A
// Shutdown that begins before finds no listener to drain: its report has no
// Method, and the listener a later Serve gets is closed the way
// Listener.Close closes it. A caller that runs Serve in a goroutine and may
// shut down at once waits for Serving first.
func (s *Server) Serving() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		s.taken = make(chan struct{})
	}
	return s.taken
}

// tookListener closes the channel Serving returns, once.
func (s *Server) tookListener() {
	s.takeOnce.Do(func() {
		s.mu.Lock()
		if s.taken == nil {
			s.taken = make(chan struct{})
		}
		close(s.taken)
		s.mu.Unlock()
	})
}

// Serve serves HTTP on l, wrapped by Wrap unless it is a *Listener already; it
// takes ownership of l. Like http.Server.Serve it returns
// http.ErrServerClosed after Shutdown, and it serves plain HTTP whatever
// HTTP.TLSConfig says (ServeTLS serves HTTPS). A nil l (untyped or a typed
// nil) gives an error matching ErrNilListener, a nil HTTP one matching
// ErrNoHTTPServer.
func (s *Server) Serve(l net.Listener) error {
	return s.serve(l, s.httpServe)
}

func (s *Server) httpServe(l net.Listener) error {
	if s.HandOver != nil {
		l = detachListener{l} // connections that can be taken at Shutdown
	}
	return s.HTTP.Serve(l)
}

// serve wraps l and runs serveFn on it: http.Server's Serve or ServeTLS.
func (s *Server) serve(l net.Listener, serveFn func(net.Listener) error) error {
	defer s.tookListener() // on every early return; after s.l is set below
	if nilListener(l) {
		return neterr.Op("serve", "tcp", nil, ErrNilListener)
	}
	if s.HTTP == nil {
		e := neterr.Op("serve", "tcp", l.Addr(), ErrNoHTTPServer)
		l.Close()
		return e
	}
	dl, ok := l.(*Listener)
	if !ok {
		opts := s.Listener
		opts.Logger, opts.OnReport = nil, nil
		var err error
		if dl, err = Wrap(l, opts); err != nil {
			l.Close()
			return err
		}
	}
	s.install()
	s.mu.Lock()
	if s.l != nil || s.draining.Load() {
		s.mu.Unlock()
		dl.Close()
		if s.draining.Load() {
			return http.ErrServerClosed
		}
		return neterr.Op("serve", "tcp", dl.Addr(), errors.New("drain.Server serves one listener"))
	}
	s.l = dl
	s.served = make(chan struct{})
	s.mu.Unlock()
	s.tookListener()
	err := s.t.serving(dl, serveFn)
	dl.Close() // http.Server.ServeTLS returns before serving when its certificate fails
	close(s.served)
	if s.draining.Load() && errors.Is(err, net.ErrClosed) {
		return http.ErrServerClosed
	}
	return err
}

// install wraps the server's hooks, once.
func (s *Server) install() {
	s.setup.Do(func() {
		hs := s.HTTP
		s.t = newTracker(hs)
		s.t.hs = hs
		h := hs.Handler
		if h == nil {
			h = http.DefaultServeMux
		}
		hs.Handler = s.t.handler(h)
		hs.ConnState = s.t.connState
		hs.ConnContext = s.t.connContext
	})
}

// Shutdown drains the server, each phase bounded by ctx: readiness fails;
// Delay; the listener stops without losing its queue; every later response
// says Connection: close (from each connection's time, with CloseSpread) and
// idle connections are closed (see IdleGrace);
// Hijacked is called; every accepted connection's pending request is served
// (silent ones get NewConnGrace); then http.Server.Shutdown. When ctx ends
// first, what is left is closed and named in the report, and the error wraps
// ctx.Err(). The report is logged once.
//
// The drain runs once. A Shutdown called while it runs waits for it and gets
// its result; one called after it gets the result at once. Every caller gets
// a copy of the report of its own. A waiting caller whose ctx ends first
// gets a nil report and an error wrapping its ctx.Err() (the drain goes on).
func (s *Server) Shutdown(ctx context.Context) (*Report, error) {
	if s.HTTP == nil {
		return nil, neterr.Op("shutdown", "tcp", nil, ErrNoHTTPServer)
	}
	rep, err, ok := s.shut.Do(ctx, func() (*Report, error) { return s.shutdown(ctx) })
	if !ok {
		return nil, neterr.Op("shutdown", "tcp", s.addr(), fmt.Errorf("waiting for the Shutdown in progress: %w", err))
	}
	return rep.clone(), err
}

// shutdown is the one drain Shutdown runs.
func (s *Server) shutdown(ctx context.Context) (*Report, error) {
	start := time.Now()
	s.draining.Store(true)
	s.install()
	h := &HTTPReport{InFlightAtStart: s.t.begin()}
	s.logBegin(h)
	errs := []error{s.delay(ctx)}
	h.DelayTook = time.Since(start)

	handOver := s.HandOver != nil
	if handOver {
		if _, err := s.HandOver(ctx, nil); err != nil {
			handOver = false // nobody takes them: a plain stop
		}
	}
	h2Open := s.t.h2Open() // a client may hang up at the first step: count them now
	// Clients are told to leave (HTTP/2 connections to go away, HTTP/1
	// responses to say Connection: close unless the connections are handed
	// over or CloseSpread spreads them) only as the listener stops taking
	// new connections: one told while it still took them would open its
	// next connection to us again, and be told again. With CloseSpread,
	// they are told one by one over the window from then (HTTP/2 here,
	// HTTP/1 in settleIdle).
	var goingAway []*h2Conn
	leave := sync.OnceFunc(func() {
		h.CloseSpread = spreadWindow(ctx, s.CloseSpread)
		if !handOver && h.CloseSpread <= 0 {
			s.t.closing.Store(true)
		}
		goingAway = s.t.goAway(h.CloseSpread)
	})
	// The keep-alive connections are handed over while the listener stops
	// (a step-out or a migration takes tens of milliseconds, which the
	// handover need not wait for): handOver goes on until the listener has
	// stopped and every connection it accepted is handed over.
	stopped := make(chan struct{})
	var handed chan struct{}
	var herr error
	if handOver {
		handed = make(chan struct{})
		go func() {
			defer close(handed)
			h.HandedOver, h.HandOverReturned, herr = s.handOver(ctx, orDefault(s.HandOverGrace, 5*time.Second), stopped)
		}()
	}
	t0 := time.Now()
	r, err := s.stopListener(ctx, leave)
	close(stopped)
	errs = append(errs, err)
	h.StopTook = time.Since(t0)
	leave() // if the listener's stop did not (it had run already)
	var h2Left int
	h.TLSPending, h2Left = s.t.markPending()
	h.HTTP2 = max(h2Open, h2Left)
	if handOver {
		<-handed
		h.HandedOverTLS, h.TLSNotHandedOver = s.t.tlsCounts()
		if herr != nil {
			h.HandOverError = herr.Error()
		}
	}
	h.IdleClosed, h.IdleClosedTLS = s.t.settleIdle(ctx, orDefault(s.IdleGrace, time.Second), h.CloseSpread)
	h.GoAwayAcked, h.GoAwayUnacked = awaitGoAway(ctx, goingAway, h.CloseSpread+orDefault(s.NewConnGrace, time.Second))
	for _, c := range s.t.hijackedConns() {
		if s.Hijacked != nil {
			s.Hijacked(c)
			h.HijackedNotified++
		}
	}
	t0 = time.Now()
	errs = append(errs, s.t.wait(ctx, orDefault(s.NewConnGrace, time.Second)))
	h.SilentClosed = s.t.closeSilent()
	h.WaitTook = time.Since(t0)
	// Closes what is idle still. Not before: net/http's HTTP/2 answers it
	// with a GOAWAY as soon as a connection has no stream (see wait).
	s.HTTP.SetKeepAlivesEnabled(false)
	s.stopConns()
	s.mu.Lock()
	h.Received = s.received
	s.mu.Unlock()
	stopNamed := s.t.closeNamedWhile()
	err = s.HTTP.Shutdown(ctx)
	h.GoAwayClosed = stopNamed()
	if err != nil {
		s.force(h)
		errs = append(errs, err)
	}
	s.t.linger.wait(ctx) // the connections closed lingering, so that none is reset (linger.go); ends by itself

	h.Completed, h.KeepAliveResponses = s.t.counts()
	h.TLSPendingServed = s.t.pendingServedCount()
	h.Took = time.Since(start)
	r.HTTP = h
	r.log(s.Logger)
	if s.OnReport != nil {
		s.OnReport(r)
	}
	return r, firstError(errs)
}

// logBegin logs that a Shutdown begins.
func (s *Server) logBegin(h *HTTPReport) {
	if s.Logger == nil {
		return
	}
	addr := ""
	if a := s.addr(); a != nil {
		addr = a.String()
	}
	s.Logger.Debug("drain begins", zap.String("event", "drain.begin"), zap.String("addr", addr),
		zap.Int("in_flight_at_start", h.InFlightAtStart), zap.Duration("delay", s.Delay))
}

// addr is the address served, nil before Serve.
func (s *Server) addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		return nil
	}
	return s.l.Addr()
}

func (s *Server) delay(ctx context.Context) error {
	if s.Delay <= 0 {
		return nil
	}
	tm := time.NewTimer(s.Delay)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopListener stops the listener, calling leave right before its socket
// stops taking new connections (see Listener.leave), and waits until every
// connection it accepted is registered.
func (s *Server) stopListener(ctx context.Context, leave func()) (*Report, error) {
	s.mu.Lock()
	l, served := s.l, s.served
	s.mu.Unlock()
	if l == nil {
		return &Report{Started: time.Now()}, nil
	}
	if testHookStopListener != nil {
		testHookStopListener()
	}
	r, err := l.stopLeaving(ctx, leave)
	if testHookListenerStopped != nil {
		testHookListenerStopped()
	}
	r = r.clone() // the listener's own report stays the listener's
	if err != nil {
		return r, err
	}
	// Once the accept loop has returned, every accepted connection is
	// registered (ConnContext runs before the next Accept).
	select {
	case <-served:
		return r, nil
	case <-ctx.Done():
		return r, ctx.Err()
	}
}

// testHookStopListener, if set by a test, runs as stopListener begins;
// testHookListenerStopped once the listener's Stop has returned.
var testHookStopListener, testHookListenerStopped func()

// force closes every connection left, hijacked ones included, naming them.
func (s *Server) force(h *HTTPReport) {
	h.Forced = s.t.leftovers(time.Now())
	for _, f := range h.Forced {
		if f.State == http.StateActive.String() {
			h.ForcedRequests++
		}
	}
	s.HTTP.Close()
	for _, c := range s.t.hijackedConns() {
		c.Close()
	}
}

// spreadWindow is the window to spread the closes over: spread, or half
// the time ctx has left if that is less.
func spreadWindow(ctx context.Context, spread time.Duration) time.Duration {
	if spread <= 0 {
		return 0
	}
	if dl, ok := ctx.Deadline(); ok {
		spread = max(0, min(spread, time.Until(dl)/2))
	}
	return spread
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
