package quicdrain

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// HTTP3 serves an http3.Server on a generation. Each connection is served
// by an http3.Server of its own (a copy of srv), so that each gets its
// GOAWAY at its own moment: see Shutdown.
type HTTP3 struct {
	g   *Gen
	srv *http3.Server
	ln  *quic.Listener

	draining atomic.Bool
	mu       sync.Mutex
	conns    map[*connServer]struct{}
	drainCtx context.Context
	wg       sync.WaitGroup // the accept loop and the connections

	told, finished, forced atomic.Int64
}

// connServer serves one connection.
type connServer struct {
	h      *HTTP3
	srv    *http3.Server
	once   sync.Once
	done   chan struct{} // closed once its Shutdown returned
	active atomic.Int64  // requests in flight
	served atomic.Int64  // requests answered
	last   atomic.Int64  // unix nanos: accepted, or the last request ended
}

// ServeHTTP3 listens on g's Transport with srv's TLSConfig (it must have
// been through http3.ConfigureTLSConfig) and QUICConfig, and serves every
// connection with a copy of srv. Call it before g.Start.
func ServeHTTP3(g *Gen, srv *http3.Server) (*HTTP3, error) {
	ln, err := g.tr.Listen(srv.TLSConfig, srv.QUICConfig)
	if err != nil {
		return nil, err
	}
	h := &HTTP3{g: g, srv: srv, ln: ln, conns: map[*connServer]struct{}{}}
	for range acceptors {
		h.wg.Add(1)
		go h.accept()
	}
	return h, nil
}

// acceptors is how many goroutines accept connections. quic-go queues at
// most 32 connections whose handshake completed and refuses the next ones
// (CONNECTION_REFUSED, after the handshake: the client's first request
// fails); at a restart every client of the predecessor reconnects at once,
// and while one accepting goroutine waits for a CPU the queue fills. Each
// goroutine waiting in Accept takes a connection straight from the
// handshake that completed (a send to a goroutine waiting on a channel
// completes at once, before that goroutine runs), so a burst of
// acceptors+32 connections is absorbed even when none of them gets a CPU
// meanwhile. 32 were too few for 208 clients reconnecting on a busy
// machine (16 refused in one of about 20 runs of TestRestartUnderLoad);
// a parked goroutine costs a few KiB.
const acceptors = 256

func (h *HTTP3) accept() {
	defer h.wg.Done()
	for {
		conn, err := h.ln.Accept(context.Background())
		if err != nil {
			return
		}
		accepted(conn)
		cs := &connServer{h: h, done: make(chan struct{})}
		cs.last.Store(time.Now().UnixNano())
		cs.srv = &http3.Server{TLSConfig: h.srv.TLSConfig, QUICConfig: h.srv.QUICConfig,
			EnableDatagrams: h.srv.EnableDatagrams, MaxHeaderBytes: h.srv.MaxHeaderBytes, IdleTimeout: h.srv.IdleTimeout,
			ConnContext: h.srv.ConnContext, Logger: h.srv.Logger, Handler: http.HandlerFunc(cs.serveHTTP)}
		h.mu.Lock()
		h.conns[cs] = struct{}{}
		h.mu.Unlock()
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			cs.srv.ServeQUICConn(conn)
			conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			h.mu.Lock()
			delete(h.conns, cs)
			h.mu.Unlock()
		}()
	}
}

// serveHTTP tells the client to go away while this request is in flight,
// once draining: quic-go's client closes a connection whose GOAWAY finds no
// request in flight, and a request it opens at that moment fails
// (H3_NO_ERROR, local) instead of being retried.
func (cs *connServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	cs.active.Add(1)
	defer func() {
		cs.served.Add(1)
		cs.last.Store(time.Now().UnixNano())
		cs.active.Add(-1)
	}()
	if cs.h.draining.Load() && cs.goAway() {
		// let the GOAWAY go out before this response ends: a client that
		// reads it after the response may open its next request in the
		// window above
		time.Sleep(GoAwayLead)
	}
	cs.h.srv.Handler.ServeHTTP(w, r)
}

// GoAwayLead is how long the request that carries a connection's GOAWAY
// waits before it is served, so that the client reads the GOAWAY while
// that request is in flight.
const GoAwayLead = 20 * time.Millisecond

// idle says whether the connection may be told to go away without a
// request in flight: none is, and none came for IdleQuiet; for a
// connection that has served none yet, only from unusedBy on (see
// NewConnQuiet), or, when that is zero, once none came for NewConnQuiet.
func (cs *connServer) idle(now, unusedBy time.Time) bool {
	if cs.active.Load() != 0 {
		return false
	}
	since := now.Sub(time.Unix(0, cs.last.Load()))
	if cs.served.Load() != 0 {
		return since >= IdleQuiet
	}
	if !unusedBy.IsZero() {
		return !now.Before(unusedBy)
	}
	return since >= NewConnQuiet
}

// goAway starts the connection's graceful shutdown (its GOAWAY) once; true
// the first time.
func (cs *connServer) goAway() (first bool) {
	cs.once.Do(func() {
		first = true
		cs.h.told.Add(1)
		cs.h.mu.Lock()
		ctx := cs.h.drainCtx
		cs.h.mu.Unlock()
		go func() {
			defer close(cs.done)
			if cs.srv.Shutdown(ctx) != nil && ctx.Err() != nil {
				cs.h.forced.Add(1)
				return
			}
			cs.h.finished.Add(1)
		}()
	})
	return first
}

// Report is what Shutdown did.
type Report struct {
	// Stats are the generation's counters once it closed.
	Stats Stats
	// HandoverError is why the successor was not told (it then reads the
	// socket after its Config.HandoverTimeout, without our table).
	HandoverError error
	// Told counts the connections sent a GOAWAY; Finished those whose
	// client then closed them, Forced those closed when ctx ended.
	Told, Finished, Forced int64
	// Handshakes counts the handshakes still under way at the GOAWAY (ctx
	// ended first).
	Handshakes int64
	// Took is how long Shutdown took.
	Took time.Duration
}

// HandshakeQuiet is how long Shutdown waits without an Initial or
// Handshake datagram before the GOAWAYs.
const HandshakeQuiet = 200 * time.Millisecond

// IdleQuiet is how long a connection may go without a request before it is
// told to go away while idle.
const IdleQuiet = 500 * time.Millisecond

// NewConnQuiet is how long before the end of the drain (Shutdown's ctx's
// deadline; at most half the drain's time) a connection that has carried no
// request yet is told to go away while idle. Until then its client is most
// likely about to send its first request: quic-go's client dials a
// connection for a request, and for the one retry it makes of a rejected
// request, and a first request refused there fails; a client starved of
// CPU may take seconds to send it. Without a deadline, NewConnQuiet is how
// long such a connection may go without a request before it is told.
const NewConnQuiet = 2 * time.Second

// Shutdown stops serving once the successor is ready (handoff's Exit):
// g.Handover (the successor reads the socket from now on and forwards us
// the datagrams of our connections); WaitHandshakes (the handshakes under
// way end); then each connection gets an HTTP/3 GOAWAY (http3.Server's
// Shutdown) with its next request, in flight (requests already sent are
// answered, later ones rejected with H3_REQUEST_REJECTED, which clients
// retry on a new connection, served by the successor; that request waits
// GoAwayLead), or when idle for IdleQuiet (if it carried no request yet,
// NewConnQuiet before ctx's deadline); its client
// then closes it once its streams are done. All bounded by ctx: when it ends, the connections left are
// closed (Forced). Then it closes g, which stops the forwarding to it.
func (h *HTTP3) Shutdown(ctx context.Context) Report {
	start := time.Now()
	var r Report
	r.HandoverError = h.g.Handover(ctx)
	h.g.WaitHandshakes(ctx, HandshakeQuiet)
	r.Handshakes = h.g.pending.Load()
	h.mu.Lock()
	h.drainCtx = ctx
	h.mu.Unlock()
	h.draining.Store(true)
	var unusedBy time.Time // see NewConnQuiet
	if dl, ok := ctx.Deadline(); ok {
		unusedBy = dl.Add(-min(NewConnQuiet, dl.Sub(start)/2))
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		h.mu.Lock()
		n := len(h.conns)
		var left []*connServer
		for cs := range h.conns {
			left = append(left, cs)
		}
		h.mu.Unlock()
		if n == 0 {
			break
		}
		now := time.Now()
		for _, cs := range left {
			if ctx.Err() != nil || cs.idle(now, unusedBy) {
				cs.goAway()
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			for _, cs := range left {
				cs.goAway()
				<-cs.done
			}
		}
	}
	h.ln.Close()
	h.g.Close() // closes the connections left
	h.wg.Wait()
	r.Told, r.Finished, r.Forced = h.told.Load(), h.finished.Load(), h.forced.Load()
	r.Stats = h.g.Stats()
	r.Took = time.Since(start)
	return r
}
