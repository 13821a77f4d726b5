package load

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A client sends one request within ctx and returns the value of the captured
// header. It is used by many goroutines at once.
type client interface {
	do(ctx context.Context) (header string, err error)
	close()
}

// newClient returns the client of c's mode. The Transport-based ones count
// in n the requests they sent more than once, and the responses that said
// Connection: close.
func newClient(c Config, u *url.URL, n *counts) client {
	switch {
	case c.RoundTripper != nil:
		return newSharedClient(c, u, n, func() http.RoundTripper { return c.RoundTripper(c.TLS.Clone()) })
	case c.HTTP2:
		return newH2Client(c, u, n)
	case c.Transport:
		return newHTTPClient(c, u, n)
	}
	return newRawClient(c, u, n)
}

// rawClient writes a hand-made HTTP/1.1 request on a net.Conn (over TLS
// with an https URL) and parses the reply with http.ReadResponse; it never
// retries.
type rawClient struct {
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	tls    *tls.Config // nil for plain HTTP
	addr   string
	req    []byte
	header string
	keep   bool
	n      *counts
	idle   chan *rawConn // kept-alive connections, when keep
	bufs   sync.Pool     // *bufio.Reader, for new connections
	// caches, when tls has a ClientSessionCache, are the session caches
	// no connection holds: one per worker, each taken by a connection as it
	// is dialled and given back when it is dropped (see Config.TLS).
	caches chan tls.ClientSessionCache
}

type rawConn struct {
	net.Conn
	br    *bufio.Reader
	cache tls.ClientSessionCache // its session cache, or nil
}

func newRawClient(c Config, u *url.URL, n *counts) *rawClient {
	method, body := http.MethodGet, ""
	if c.Post {
		method, body = http.MethodPost, postBody
	}
	req := method + " " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: zerodrop-load\r\n"
	if !c.KeepAlive {
		req += "Connection: close\r\n"
	}
	if c.Post {
		req += "Content-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	return &rawClient{
		dial:   c.Dial,
		tls:    c.TLS,
		addr:   u.Host,
		req:    []byte(req + "\r\n" + body),
		header: c.Header,
		keep:   c.KeepAlive,
		n:      n,
		idle:   make(chan *rawConn, c.Concurrency),
		caches: sessionCaches(c),
	}
}

// sessionCaches returns the pool of session caches, one per worker
// (c.Concurrency: a worker holds at most one connection, so one is free
// whenever a worker dials), or nil if c.TLS has no ClientSessionCache.
func sessionCaches(c Config) chan tls.ClientSessionCache {
	if c.TLS == nil || c.TLS.ClientSessionCache == nil {
		return nil
	}
	caches := make(chan tls.ClientSessionCache, c.Concurrency)
	for range c.Concurrency {
		caches <- tls.NewLRUClientSessionCache(1)
	}
	return caches
}

// clientTLS returns the TLS config of a new connection, and its session
// cache: with caches, a clone whose cache is that of a connection dropped
// before (a client that reconnects offers its last ticket). It waits for
// one (another worker is giving one back) until ctx ends.
func (c *rawClient) clientTLS(ctx context.Context) (*tls.Config, tls.ClientSessionCache, error) {
	if c.caches == nil {
		return c.tls, nil, nil
	}
	var cache tls.ClientSessionCache
	select {
	case cache = <-c.caches:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	cfg := c.tls.Clone()
	cfg.ClientSessionCache = cache
	return cfg, cache, nil
}

func (c *rawClient) do(ctx context.Context) (string, error) {
	conn, err := c.get(ctx)
	if err != nil {
		return "", err
	}
	hv, reuse, err := c.exchange(ctx, conn)
	if err != nil {
		err = &localError{err: err, local: conn.LocalAddr().String()}
	}
	if err == nil && reuse && c.keep {
		select {
		case c.idle <- conn:
			return hv, nil
		default:
		}
	}
	c.drop(conn)
	return hv, err
}

// get returns an idle connection, or dials a new one (and completes its
// TLS handshake, with an https URL).
func (c *rawClient) get(ctx context.Context) (*rawConn, error) {
	select {
	case conn := <-c.idle:
		return conn, nil
	default:
	}
	nc, err := c.dial(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	var cache tls.ClientSessionCache
	if c.tls != nil {
		cfg, ca, err := c.clientTLS(ctx)
		if err != nil {
			nc.Close()
			return nil, &localError{err: err, local: nc.LocalAddr().String()}
		}
		cache = ca
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			c.putCache(cache)
			return nil, &localError{err: err, local: nc.LocalAddr().String()}
		}
		nc = tc
	}
	br, _ := c.bufs.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReader(nc)
	} else {
		br.Reset(nc)
	}
	return &rawConn{Conn: nc, br: br, cache: cache}, nil
}

func (c *rawClient) drop(conn *rawConn) {
	conn.Close()
	conn.br.Reset(nil)
	c.bufs.Put(conn.br)
	c.putCache(conn.cache)
}

// putCache hands a dropped connection's session cache to the next one
// dialled.
func (c *rawClient) putCache(cache tls.ClientSessionCache) {
	if cache == nil {
		return
	}
	select {
	case c.caches <- cache:
	default:
	}
}

// exchange sends the request on conn and reads the whole reply, within ctx.
// reuse reports whether the server allows another request on conn.
func (c *rawClient) exchange(ctx context.Context, conn *rawConn) (hv string, reuse bool, err error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	// Cancelling ctx unblocks the exchange; wait for that callback to finish
	// so that no goroutine outlives the request.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired
		}
	}()
	if _, err := conn.Write(c.req); err != nil {
		return "", false, err
	}
	resp, err := http.ReadResponse(conn.br, nil)
	if err != nil {
		return "", false, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", false, err
	}
	if resp.StatusCode >= 400 {
		err = &statusError{resp.StatusCode}
	}
	if resp.Close && c.keep {
		c.n.askedClose.Add(1)
	}
	return resp.Header.Get(c.header), !resp.Close, err
}

func (c *rawClient) close() {
	for {
		select {
		case conn := <-c.idle:
			c.drop(conn)
		default:
			return
		}
	}
}

// httpClient sends requests through net/http's Transport, HTTP/1.1 only,
// which retries some failures on reused connections.
type httpClient struct {
	tr     *http.Transport
	reqs   requests
	header string
	n      *counts
}

func newHTTPClient(c Config, u *url.URL, n *counts) *httpClient {
	tr := newTransport(c, false)
	tr.DisableKeepAlives = !c.KeepAlive
	tr.MaxIdleConnsPerHost = c.Concurrency
	return &httpClient{tr: tr, reqs: newRequests(c, u), header: c.Header, n: n}
}

// newTransport returns a Transport for c that speaks HTTP/1.1 only, or
// HTTP/2 only with h2, over TLS with c.TLS for an https URL.
func newTransport(c Config, h2 bool) *http.Transport {
	var p http.Protocols
	p.SetHTTP1(!h2)
	p.SetHTTP2(h2)
	return &http.Transport{
		DialContext:        c.Dial,
		TLSClientConfig:    c.TLS.Clone(), // a Transport adds to its NextProtos
		Protocols:          &p,
		DisableCompression: true,
	}
}

// postBody is the body of every request with Config.Post.
const postBody = "zerodrop-load\n"

// requests makes the requests of the Transport-based clients: GETs, or
// with Config.Post POSTs of postBody that net/http cannot replay.
type requests struct {
	u    *url.URL
	get  *http.Request // nil with post
	post bool
}

func newRequests(c Config, u *url.URL) requests {
	if c.Post {
		return requests{u: u, post: true}
	}
	return requests{u: u, get: &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{
		"User-Agent": {"zerodrop-load"},
	}}}
}

// request returns the request of one call within ctx. A POST's body is
// read as it is sent, so each call gets a request of its own.
func (r requests) request(ctx context.Context) *http.Request {
	if r.post {
		return postRequest(ctx, r.u, unreplayable(postBody), len(postBody))
	}
	return r.get.WithContext(ctx)
}

// postRequest returns a POST to u within ctx of body, n bytes long, with a
// nil GetBody, so that net/http cannot replay it once it has used the body
// (Config.Post).
func postRequest(ctx context.Context, u *url.URL, body io.Reader, n int) *http.Request {
	return (&http.Request{
		Method: http.MethodPost, URL: u, Host: u.Host,
		Header: http.Header{"User-Agent": {"zerodrop-load"}, "Content-Type": {"text/plain"}},
		Body:   io.NopCloser(body), ContentLength: int64(n),
	}).WithContext(ctx)
}

// unreplayable returns a reader of s that is not a *strings.Reader,
// *bytes.Reader or *bytes.Buffer, the readers http.NewRequest makes a
// GetBody for, as a body streamed from a file or a pipe would be. net/http
// also writes it after the headers, not with them.
func unreplayable(s string) io.Reader { return struct{ io.Reader }{strings.NewReader(s)} }

func (c *httpClient) do(ctx context.Context) (string, error) {
	return roundTrip(c.tr, c.reqs.request(ctx), c.header, c.n)
}

func (c *httpClient) close() { c.tr.CloseIdleConnections() }

// sharedClient sends requests through round trippers that
// Config.StreamsPerConn workers' worth of requests share, each holding one
// connection, so that many streams run on few connections: net/http's
// Transports over HTTP/2 (newH2Client), or Config.RoundTripper's. Requests
// go to the round trippers in turn.
type sharedClient struct {
	trs    []http.RoundTripper
	next   atomic.Uint64
	reqs   requests
	header string
	n      *counts
}

func newSharedClient(c Config, u *url.URL, n *counts, rt func() http.RoundTripper) *sharedClient {
	conns := (c.Concurrency + c.StreamsPerConn - 1) / c.StreamsPerConn
	h := &sharedClient{trs: make([]http.RoundTripper, conns), reqs: newRequests(c, u), header: c.Header, n: n}
	for i := range h.trs {
		h.trs[i] = rt()
	}
	return h
}

// newH2Client returns a sharedClient of HTTP/2 Transports.
func newH2Client(c Config, u *url.URL, n *counts) *sharedClient {
	return newSharedClient(c, u, n, func() http.RoundTripper {
		tr := newTransport(c, true)
		// For HTTP/2 this bounds the dials in progress: the requests
		// that find no connection wait for the one being dialled.
		tr.MaxConnsPerHost = 1
		return tr
	})
}

func (c *sharedClient) do(ctx context.Context) (string, error) {
	tr := c.trs[(c.next.Add(1)-1)%uint64(len(c.trs))]
	return roundTrip(tr, c.reqs.request(ctx), c.header, c.n)
}

func (c *sharedClient) close() {
	for _, tr := range c.trs {
		switch t := tr.(type) {
		case io.Closer:
			t.Close()
		case interface{ CloseIdleConnections() }:
			t.CloseIdleConnections()
		}
	}
}

// roundTrip sends req on tr, reads the whole reply and returns its header
// named header; a status of 400 or above is a *statusError. A request the
// Transport sent more than once (it got a connection for it more than once)
// counts in n.retried, a response that said Connection: close in
// n.askedClose.
func roundTrip(tr http.RoundTripper, req *http.Request, header string, n *counts) (string, error) {
	var conns atomic.Int32
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { conns.Add(1) },
	}))
	resp, err := tr.RoundTrip(req)
	if conns.Load() > 1 {
		n.retried.Add(1)
	}
	if err != nil {
		return "", err
	}
	if resp.Close {
		n.askedClose.Add(1)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode >= 400 {
		err = &statusError{resp.StatusCode}
	}
	return resp.Header.Get(header), err
}

// localError is a failed exchange on a connection, with the connection's
// local address: the one thing that finds it in a capture or a server log.
type localError struct {
	err   error
	local string
}

func (e *localError) Error() string { return e.err.Error() + " (local " + e.local + ")" }
func (e *localError) Unwrap() error { return e.err }
