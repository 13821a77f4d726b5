package drain

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/tlsresume"
)

// Handing connections over to a successor instead of closing them.
//
// With Server.HandOver set, Serve wraps each connection it accepts so that
// it can be taken from net/http while it waits for its next request (see
// detachConn). At Shutdown, once the listener has stopped, every plain
// HTTP/1.1 connection is handed over as soon as it waits so (at once when
// idle, after its response when busy), until HandOverGrace; the successor
// serves it with ServeConn. What is left after that gets the usual
// treatment (IdleGrace, then closed).

// Detached is a connection taken from net/http, for Server.HandOver.
type Detached struct {
	// Conn is the socket.
	Conn *net.TCPConn
	// Unread is what was read from it but not consumed: it precedes what
	// the socket holds (pass it to ServeConn). For a TLS connection
	// (Server.TLSHandOver) it is its marshalled tlsresume.State, secrets
	// included: pass it only over the handoff socket, unlogged; the drain
	// zeroes it once HandOver has taken it.
	Unread []byte
}

// ServeConn serves c, a connection accepted elsewhere (typically a
// predecessor's, passed with package handoff), as if Serve had accepted it:
// net/http reads unread first, then the socket. It may be called before,
// with or after Serve, from any goroutine; it returns once net/http has
// the connection. After Shutdown has stopped taking connections it closes c
// and returns http.ErrServerClosed. Connections served so are handed over
// again at Shutdown, like those Serve accepts.
func (s *Server) ServeConn(c *net.TCPConn, unread []byte) error {
	if c == nil {
		return neterr.Op("serve", "tcp", nil, errors.New("nil connection"))
	}
	if s.HTTP == nil {
		c.Close()
		return neterr.Op("serve", "tcp", c.LocalAddr(), ErrNoHTTPServer)
	}
	s.install()
	s.mu.Lock()
	if s.connsOver {
		s.mu.Unlock()
		c.Close()
		return http.ErrServerClosed
	}
	if s.cl == nil {
		s.cl = newConnListener(c.LocalAddr())
		s.clServed = make(chan struct{})
		go func() {
			defer close(s.clServed)
			s.t.serving(s.cl, s.HTTP.Serve)
		}()
	}
	cl := s.cl
	s.received++
	s.mu.Unlock()
	if tlsresume.IsState(unread) {
		return s.serveTLSState(c, unread, cl)
	}
	dc := newDetachConn(c, unread)
	s.t.register(dc) // before net/http has it: a drain now waits for it
	if !cl.serve(dc) {
		s.t.forget(dc)
		c.Close()
		return http.ErrServerClosed
	}
	return nil
}

// stopConns makes ServeConn refuse from now on, and ends its serve loop.
func (s *Server) stopConns() {
	s.mu.Lock()
	s.connsOver = true
	cl, served := s.cl, s.clServed
	s.mu.Unlock()
	if cl != nil {
		cl.Close()
		<-served
	}
}

// defaultHandOverBatch is Server.HandOverBatch's default. A connection's
// request waits from its take until the successor serves it: its batch is
// detached, sent, validated, acknowledged and served again as a whole, and
// the larger the batch the longer each of its connections is in transit.
// Until its own batch, a connection is served here, so small batches keep
// each connection's transit to one batch's round trip (BenchmarkTransitWait
// in package handoff compares batch sizes).
const defaultHandOverBatch = 16

// handOver hands the plain HTTP/1.1 connections over, each as soon as
// net/http waits for its next request, at most HandOverBatch at a time,
// until none is left, grace ends, or HandOver fails (it returns that error). A connection detached but not
// taken is served here again (returned).
//
// It begins as the listener begins to stop, and goes on until stopped is
// closed (the listener has stopped: every connection it accepted is
// tracked) and nothing is left; grace runs from then.
func (s *Server) handOver(ctx context.Context, grace time.Duration, stopped <-chan struct{}) (taken, returned int, err error) {
	var graceOver <-chan time.Time // armed once the listener has stopped
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	size := orDefaultInt(s.HandOverBatch, defaultHandOverBatch)
	for {
		done := stopped == nil // the listener had stopped before this pass
		if done && graceOver == nil {
			tm := time.NewTimer(grace)
			defer tm.Stop()
			graceOver = tm.C
		}
		cands, left := s.t.detachable()
		tlsNow, tlsLeft := s.t.tlsCandidates()
		left += tlsLeft
		var begun []*detachConn
		for _, dc := range cands {
			if len(begun) == size {
				break // the rest are served here meanwhile
			}
			if dc.beginDetach() {
				begun = append(begun, dc)
			}
		}
		batch := make([]Detached, 0, len(begun))
		var tlsBatch []Detached
		for _, dc := range begun {
			c, unread, ferr := dc.finishDetach(ctx)
			if ferr != nil { // ctx ended while net/http let go: closed
				err = ferr
				continue
			}
			tc, isTCP := c.(*net.TCPConn)
			switch {
			case !isTCP: // a TLS session handed to us, going on
				if d, ok := s.t.exportTLS(c, unread); ok {
					tlsBatch = append(tlsBatch, d)
				}
			case tlsresume.IsState(unread): // a malformed request that looks like TLS state
				c.Close()
			default:
				batch = append(batch, Detached{Conn: tc, Unread: unread})
			}
		}
		plain := len(batch)
		batch = append(batch, tlsBatch...)
		for _, c := range tlsNow {
			d, ok, terr := s.t.takeTLS(ctx, c)
			if terr != nil {
				err = terr
			} else if ok {
				batch = append(batch, d)
			}
		}
		if len(batch) > 0 {
			n, herr := s.HandOver(ctx, batch)
			n = min(max(n, 0), len(batch))
			taken += n
			s.t.mu.Lock()
			s.t.tlsHanded += max(n-plain, 0)
			s.t.mu.Unlock()
			for _, d := range batch[plain:max(n, plain)] {
				clear(d.Unread) // the session's secrets: passed on, erased here
			}
			for _, d := range batch[n:] {
				if s.ServeConn(d.Conn, d.Unread) == nil {
					returned++
				}
			}
			if herr == nil && n < len(batch) {
				herr = errors.New("HandOver took fewer connections than it was given")
			}
			if herr != nil {
				return taken, returned, herr
			}
		}
		if err != nil || (left == 0 && done) {
			return taken, returned, err
		}
		if len(begun) == size {
			continue // more are waiting to be taken: no tick
		}
		select {
		case <-ctx.Done():
			return taken, returned, ctx.Err()
		case <-graceOver:
			return taken, returned, nil
		case <-stopped:
			stopped = nil
		case <-tick.C:
		}
	}
}

// detachable returns the connections that may be taken now (plain HTTP/1,
// or TLS sessions handed to us, new or idle), and how many are left to hand
// over in all (those, and those in a request).
func (t *tracker) detachable() (now []*detachConn, left int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, ci := range t.conns {
		dc, ok := c.(*detachConn)
		if !ok || ci.h2 {
			continue
		}
		switch ci.state {
		case http.StateNew, http.StateIdle:
			now = append(now, dc)
			left++
		case http.StateActive:
			left++
		}
	}
	return now, left
}

// register adds a connection before net/http has it (ServeConn).
func (t *tracker) register(c net.Conn) {
	t.mu.Lock()
	t.conns[c] = &connInfo{remote: c.RemoteAddr().String(), since: time.Now(), state: http.StateNew, resumed: true}
	t.mu.Unlock()
}

// forget removes a connection net/http never got.
func (t *tracker) forget(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

func orDefaultInt(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}
