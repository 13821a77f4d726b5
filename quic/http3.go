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
	h    *HTTP3
	srv  *http3.Server
	once sync.Once
	done chan struct{} // closed once its Shutdown returned
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
	h.wg.Add(1)
	go h.accept()
	return h, nil
}

func (h *HTTP3) accept() {
	defer h.wg.Done()
	for {
		conn, err := h.ln.Accept(context.Background())
		if err != nil {
			return
		}
		accepted(conn)
		cs := &connServer{h: h, done: make(chan struct{})}
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
	if cs.h.draining.Load() {
		cs.goAway()
	}
	cs.h.srv.Handler.ServeHTTP(w, r)
}

// goAway starts the connection's graceful shutdown (its GOAWAY) once.
func (cs *connServer) goAway() {
	cs.once.Do(func() {
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
// Handshake datagram before the GOAWAYs, and how long a connection may go
// without a request before it is told to go away while idle.
const HandshakeQuiet = 200 * time.Millisecond

// Shutdown stops serving once the successor is ready (handoff's Exit):
// g.Handover (the successor reads the socket from now on and forwards us
// the datagrams of our connections); WaitHandshakes (the handshakes under
// way end); then each connection gets an HTTP/3 GOAWAY (http3.Server's
// Shutdown) with its next request, in flight (requests already sent are
// answered, later ones rejected with H3_REQUEST_REJECTED, which clients
// retry on a new connection, served by the successor), or after
// HandshakeQuiet without one; its client then closes it once its streams
// are done. All bounded by ctx: when it ends, the connections left are
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
	t := time.NewTimer(HandshakeQuiet)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	for {
		// connections without a request since, and those accepted since
		h.mu.Lock()
		var left []*connServer
		for cs := range h.conns {
			select {
			case <-cs.done: // its goroutine is about to forget it
			default:
				left = append(left, cs)
			}
		}
		n := len(h.conns)
		h.mu.Unlock()
		if len(left) == 0 {
			if n == 0 {
				break
			}
			time.Sleep(time.Millisecond)
			continue
		}
		for _, cs := range left {
			cs.goAway()
		}
		for _, cs := range left {
			<-cs.done
		}
		if ctx.Err() != nil {
			break
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
