package quicdrain

import (
	"context"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// HTTP3 serves an http3.Server on a generation.
type HTTP3 struct {
	g   *Gen
	srv *http3.Server
	ln  *quic.Listener

	mu   sync.Mutex
	late *http3.Server // serves connections accepted after the GOAWAY began
	wg   sync.WaitGroup
}

// ServeHTTP3 listens on g's Transport with srv's TLSConfig (it must have
// been through http3.ConfigureTLSConfig) and QUICConfig, and serves every
// connection with srv. Call it before g.Start.
func ServeHTTP3(g *Gen, srv *http3.Server) (*HTTP3, error) {
	ln, err := g.tr.Listen(srv.TLSConfig, srv.QUICConfig)
	if err != nil {
		return nil, err
	}
	h := &HTTP3{g: g, srv: srv, ln: ln}
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
		h.mu.Lock()
		s := h.srv
		if h.late != nil {
			s = h.late
		}
		h.mu.Unlock()
		go func() {
			if s.ServeQUICConn(conn) != nil && conn.Context().Err() == nil {
				// served by nobody (accepted after the last GOAWAY)
				conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			}
		}()
	}
}

// Report is what Shutdown did.
type Report struct {
	// Stats are the generation's counters once it closed.
	Stats Stats
	// HandoverError is why the successor was not told (it then reads the
	// socket after its Config.HandoverTimeout, without our table).
	HandoverError error
	// Forced is true when ctx ended before every connection had left: the
	// rest were closed (srv.Close).
	Forced bool
	// Handshakes counts the handshakes still under way when ctx ended (0
	// when they all ended before the GOAWAY).
	Handshakes int64
	// Took is how long Shutdown took.
	Took time.Duration
}

// HandshakeQuiet is how long Shutdown waits without an Initial or
// Handshake datagram before the GOAWAY.
const HandshakeQuiet = 200 * time.Millisecond

// Shutdown stops serving once the successor is ready (handoff's Exit):
// g.Handover (the successor reads the socket from now on and forwards us
// the datagrams of our connections), WaitHandshakes (the handshakes under
// way, which the successor forwards, end), srv.Shutdown (an HTTP/3 GOAWAY
// on every connection; requests already sent are answered, later ones
// rejected with H3_REQUEST_REJECTED, which clients retry elsewhere; each
// client closes its connection once its streams are done), bounded by ctx:
// when it ends, the connections left are closed. A connection whose
// handshake ends after the GOAWAY began is served by a second server,
// told to go away once the first is done. Then it closes g, which stops
// the forwarding to it.
func (h *HTTP3) Shutdown(ctx context.Context) Report {
	start := time.Now()
	var r Report
	r.HandoverError = h.g.Handover(ctx)
	h.g.WaitHandshakes(ctx, HandshakeQuiet)
	r.Handshakes = h.g.pending.Load()
	late := &http3.Server{Handler: h.srv.Handler, TLSConfig: h.srv.TLSConfig, QUICConfig: h.srv.QUICConfig,
		EnableDatagrams: h.srv.EnableDatagrams, MaxHeaderBytes: h.srv.MaxHeaderBytes, IdleTimeout: h.srv.IdleTimeout,
		ConnContext: h.srv.ConnContext, Logger: h.srv.Logger}
	h.mu.Lock()
	h.late = late
	h.mu.Unlock()
	if err := h.srv.Shutdown(ctx); err != nil && ctx.Err() != nil {
		r.Forced = true
	}
	if err := late.Shutdown(ctx); err != nil && ctx.Err() != nil {
		r.Forced = true
	}
	h.ln.Close()
	h.g.Close()
	h.wg.Wait()
	r.Stats = h.g.Stats()
	r.Took = time.Since(start)
	return r
}
