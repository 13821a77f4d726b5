package drain

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/tlsresume"
)

// ServeTLS is Serve for HTTPS, like http.Server.ServeTLS: HTTP.TLSConfig is
// honoured (cloned, with h2 and http/1.1 offered by ALPN as net/http does),
// and certFile and keyFile, if given, hold the certificate; they may be empty
// when HTTP.TLSConfig has Certificates, GetCertificate or GetConfigForClient.
// It takes ownership of l, and returns http.ErrServerClosed after Shutdown.
//
// The drain treats a TLS connection like a plain one: accepted before the
// listener stopped, it is served whenever its handshake and first request
// arrive within NewConnGrace, counted from the end of the server's side of
// a handshake in progress (which completes however long the server takes);
// the report counts them (HTTPReport.TLSPending, TLSPendingServed). HTTP/2
// connections are never closed as idle: each is told to go away in RFC
// 9113's two steps (see "TLS and HTTP/2" in the package doc), and its streams
// finish. A client told to leave reconnects to the successor, which resumes
// its session only if it has the session-ticket keys: install a
// ticket.Keys into HTTP.TLSConfig and hand it over (handoff.Config.TicketKeys;
// zerodrop.Serve does both).
func (s *Server) ServeTLS(l net.Listener, certFile, keyFile string) error {
	return s.serve(l, func(dl net.Listener) error {
		var capture *tlsresume.Capture
		if s.TLSHandOver && s.HandOver != nil {
			capture = new(tlsresume.Capture)
			s.HTTP.TLSConfig = capture.Config(s.HTTP.TLSConfig)
		}
		return s.HTTP.ServeTLS(tlsListener{dl, s.t, capture}, certFile, keyFile)
	})
}

// negotiatedH2 reports whether c is a TLS connection that chose HTTP/2 by
// ALPN. Call it only once c's handshake is over (ConnectionState waits for a
// handshake in progress).
func negotiatedH2(c *tls.Conn) bool {
	return c.ConnectionState().NegotiatedProtocol == "h2"
}

// rawConn is the connection under TLS, if any.
func rawConn(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		return tc.NetConn()
	}
	return c
}

// probeH2 notes, at a TLS connection's first step out of StateNew (its
// handshake is over then), whether it speaks HTTP/2.
func (t *tracker) probeH2(c net.Conn, s http.ConnState) {
	if s != http.StateActive && s != http.StateIdle {
		return
	}
	t.mu.Lock()
	ci := t.conns[c]
	probe := ci != nil && ci.tls != nil && !ci.probed
	if probe {
		ci.probed = true
	}
	t.mu.Unlock()
	if !probe || !negotiatedH2(ci.tls) {
		return
	}
	t.mu.Lock()
	ci.h2 = true
	t.mu.Unlock()
	if rec := recorder(c); rec != nil {
		rec.Stop() // HTTP/2 is never handed over: follow it no more
	}
}

// markPending marks the TLS connections that have not sent a request yet
// (handshake, or first request, still to come) when the listener has
// stopped, and counts them and the HTTP/2 connections open.
func (t *tracker) markPending() (pending, h2 int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ci := range t.conns {
		switch {
		case ci.h2:
			h2++
		case ci.tls != nil && ci.state == http.StateNew:
			ci.pending = true
			pending++
		}
	}
	return pending, h2
}

func (t *tracker) pendingServedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingServed
}

// fresh: accepted but no request read yet (StateNew), or an HTTP/2
// connection past its preface that has not sent a stream yet: a GOAWAY now
// would say last stream 0 and refuse the request it is about to send.
func (ci *connInfo) fresh() bool {
	return (ci.state == http.StateNew && !ci.resumed) || (ci.h2 && ci.served == 0 && ci.state == http.StateIdle)
}

// tlsListener is the listener ServeTLS hands net/http: each connection it
// accepts notes, for the tracker, the handshake's first read (the
// ClientHello) and the server's first write (its answer: the costly part of
// the handshake, the signature, is done), so that a handshake the server is
// slow to answer is not taken for a silent client (see tracker.busy).
type tlsListener struct {
	net.Listener
	t       *tracker
	capture *tlsresume.Capture // TLSHandOver: each connection gets a Recorder
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.capture != nil {
		c = l.capture.Wrap(c)
	}
	return &tlsRaw{Conn: c, t: l.t}, nil
}

// tlsRaw is a connection under TLS, as crypto/tls reads and writes it.
type tlsRaw struct {
	net.Conn
	t      *tracker
	ci     *connInfo   // set by ConnContext, before the handshake
	closed atomic.Bool // Close has begun its lingering close (linger.go)
}

func (c *tlsRaw) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.ci != nil && c.ci.hello.Load() == 0 {
		c.ci.hello.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *tlsRaw) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.ci != nil && c.ci.shook.Load() == 0 {
		c.ci.shook.Store(time.Now().UnixNano())
		c.t.signal()
	}
	return n, err
}

// SyscallConn is the connection's own (the drain reads TCP_INFO through it).
func (c *tlsRaw) SyscallConn() (syscall.RawConn, error) {
	if c.closed.Load() {
		return nil, net.ErrClosed // lingering: closed to everyone but the linger
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}
