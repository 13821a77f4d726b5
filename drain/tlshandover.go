package drain

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"

	"github.com/zerodrop/zerodrop/tlsresume"
)

// Handing idle TLS 1.3 connections over with their session (Server.TLSHandOver).
//
// ServeTLS puts a tlsresume.Capture into HTTP.TLSConfig (its KeyLogWriter,
// chained) and a tlsresume.Recorder under each connection's tls.Conn (under
// tlsRaw). At Shutdown, handOver offers each idle HTTP/1.1 TLS connection
// whose Recorder proves its state (tlsresume.Recorder.ProveIdleHTTP): it is
// taken from net/http and crypto/tls, and goes to HandOver as a Detached
// whose Unread is its marshalled tlsresume.State. ServeConn recognises such
// state (tlsresume.IsState) and continues the session with a
// tlsresume.Conn. A connection whose state cannot be proven (TLS 1.2,
// client certificates, anything the Recorder could not follow) stays, and
// is closed as before; the report counts both kinds.

// recorder returns the Recorder under a TLS connection, if any.
func recorder(c net.Conn) *tlsresume.Recorder {
	raw, ok := rawConn(c).(*tlsRaw)
	if !ok {
		return nil
	}
	r, _ := raw.Conn.(*tlsresume.Recorder)
	return r
}

// tlsCandidates returns the TLS connections that may be proven now (idle
// HTTP/1.1, neither refused nor taken before), and how many are left to hand over in all
// (those and those in a request).
func (t *tracker) tlsCandidates() (now []net.Conn, left int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, ci := range t.conns {
		if ci.tls == nil || ci.h2 || ci.tlsRefused || ci.tlsTaken || recorder(c) == nil {
			continue
		}
		switch ci.state {
		case http.StateIdle:
			now = append(now, c)
			left++
		case http.StateActive:
			left++
		}
	}
	return now, left
}

// takeTLS proves and takes c; ok false means not now (busy) or never
// (refused, counted in t.tlsRefused). The Detached's Unread is the
// marshalled State, which the caller zeroes once handed over.
func (t *tracker) takeTLS(ctx context.Context, c net.Conn) (d Detached, ok bool, err error) {
	rec := recorder(c)
	cs := c.(*tls.Conn).ConnectionState() // the handshake is over: idle
	perr := errors.New("client certificates")
	if len(cs.PeerCertificates) == 0 {
		perr = rec.ProveIdleHTTP()
	}
	if errors.Is(perr, tlsresume.ErrBusy) {
		return Detached{}, false, nil
	}
	if perr != nil {
		t.mu.Lock()
		if ci := t.conns[c]; ci != nil && !ci.tlsRefused {
			ci.tlsRefused = true
			t.tlsRefused++
		}
		t.mu.Unlock()
		return Detached{}, false, nil
	}
	raw, st, err := rec.Take(ctx)
	if err != nil {
		return Detached{}, false, err
	}
	// net/http lets it go (StateClosed) in its own time: until then the
	// next round must not take it again (and count it refused, its
	// recorder emptied)
	t.mu.Lock()
	if ci := t.conns[c]; ci != nil {
		ci.tlsTaken = true
	}
	t.mu.Unlock()
	defer st.Zero()
	st.ServerName, st.NegotiatedProtocol = cs.ServerName, cs.NegotiatedProtocol
	tc, isTCP := raw.(*net.TCPConn)
	b, merr := st.MarshalBinary()
	if !isTCP || merr != nil {
		raw.Close()
		return Detached{}, false, errors.Join(errors.New("take tls: not a TCP connection"), merr)
	}
	return Detached{Conn: tc, Unread: b}, true, nil
}

// serveTLSState is ServeConn for a connection whose state bytes are a
// tlsresume.State: net/http serves it over a tlsresume.Conn, in a
// detachConn, so that it is handed over again like a plain connection
// (exportTLS), and closed idle as a TLS one otherwise.
func (s *Server) serveTLSState(c *net.TCPConn, state []byte, cl *connListener) error {
	var st tlsresume.State
	err := st.UnmarshalBinary(state)
	clear(state)
	if err != nil {
		c.Close()
		return &net.OpError{Op: "serve", Net: "tcp", Addr: c.LocalAddr(), Err: err}
	}
	conn, err := tlsresume.New(c, &st)
	if err != nil {
		c.Close()
		return &net.OpError{Op: "serve", Net: "tcp", Addr: c.LocalAddr(), Err: err}
	}
	dc := newDetachConn(conn, nil) // so that it can be handed over again
	s.t.register(dc)
	s.t.mu.Lock()
	if ci := s.t.conns[dc]; ci != nil {
		ci.continued = conn
	}
	s.t.mu.Unlock()
	if !cl.serve(dc) {
		s.t.forget(dc)
		conn.Close()
		return http.ErrServerClosed
	}
	return nil
}

// withTLSState sets r.TLS for a request on a continued TLS session (net/http
// sets it only for a *tls.Conn), so handlers see HTTPS as they did before
// the handover.
func withTLSState(r *http.Request, ci *connInfo) {
	if ci != nil && ci.continued != nil && r.TLS == nil {
		cs := ci.continued.ConnectionState()
		r.TLS = &cs
	}
}

// tlsCounts returns the TLS connections handed over, and those refused.
func (t *tracker) tlsCounts() (handed, refused int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tlsHanded, t.tlsRefused
}

// exportTLS makes a Detached of a TLS session handed to us and taken again
// (c, a *tlsresume.Conn), with plain, the application data read during the
// take; ok false means it had ended (closed, counted as refused).
func (t *tracker) exportTLS(c sockConn, plain []byte) (Detached, bool) {
	defer clear(plain)
	refuse := func() (Detached, bool) {
		c.Close()
		t.mu.Lock()
		t.tlsRefused++
		t.mu.Unlock()
		return Detached{}, false
	}
	conn, ok := c.(*tlsresume.Conn)
	if !ok {
		return refuse()
	}
	raw, st, err := conn.Export(plain)
	if err != nil {
		return refuse()
	}
	defer st.Zero()
	tc, isTCP := raw.(*net.TCPConn)
	b, err := st.MarshalBinary()
	if !isTCP || err != nil {
		raw.Close()
		return refuse()
	}
	return Detached{Conn: tc, Unread: b}, true
}
