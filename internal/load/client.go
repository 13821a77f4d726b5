package load

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// A client sends one request within ctx and returns the value of the captured
// header. It is used by many goroutines at once.
type client interface {
	do(ctx context.Context) (header string, err error)
	close()
}

func newClient(c Config, u *url.URL) client {
	if c.Transport {
		return newHTTPClient(c, u)
	}
	return newRawClient(c, u)
}

// rawClient writes a hand-made HTTP/1.1 request on a net.Conn and parses the
// reply with http.ReadResponse; it never retries.
type rawClient struct {
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
	addr   string
	req    []byte
	header string
	keep   bool
	idle   chan *rawConn // kept-alive connections, when keep
	bufs   sync.Pool     // *bufio.Reader, for new connections
}

type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func newRawClient(c Config, u *url.URL) *rawClient {
	req := "GET " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\nUser-Agent: zerodrop-load\r\n"
	if !c.KeepAlive {
		req += "Connection: close\r\n"
	}
	return &rawClient{
		dial:   c.Dial,
		addr:   u.Host,
		req:    []byte(req + "\r\n"),
		header: c.Header,
		keep:   c.KeepAlive,
		idle:   make(chan *rawConn, c.Concurrency),
	}
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

// get returns an idle connection, or dials a new one.
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
	br, _ := c.bufs.Get().(*bufio.Reader)
	if br == nil {
		br = bufio.NewReader(nc)
	} else {
		br.Reset(nc)
	}
	return &rawConn{Conn: nc, br: br}, nil
}

func (c *rawClient) drop(conn *rawConn) {
	conn.Close()
	conn.br.Reset(nil)
	c.bufs.Put(conn.br)
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

// httpClient sends requests through net/http's Transport, which retries some
// failures on reused connections.
type httpClient struct {
	tr     *http.Transport
	req    *http.Request
	header string
}

func newHTTPClient(c Config, u *url.URL) *httpClient {
	tr := &http.Transport{
		DialContext:         c.Dial,
		DisableKeepAlives:   !c.KeepAlive,
		DisableCompression:  true,
		MaxIdleConnsPerHost: c.Concurrency,
	}
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{
		"User-Agent": {"zerodrop-load"},
	}}
	return &httpClient{tr: tr, req: req, header: c.Header}
}

func (c *httpClient) do(ctx context.Context) (string, error) {
	return roundTrip(c.tr, c.req.WithContext(ctx), c.header)
}

// roundTrip sends req on tr, reads the whole reply and returns its header
// named header; a status of 400 or above is a *statusError.
func roundTrip(tr http.RoundTripper, req *http.Request, header string) (string, error) {
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode >= 400 {
		err = &statusError{resp.StatusCode}
	}
	return resp.Header.Get(header), err
}

func (c *httpClient) close() { c.tr.CloseIdleConnections() }

// localError is a failed exchange on a connection, with the connection's
// local address: the one thing that finds it in a capture or a server log.
type localError struct {
	err   error
	local string
}

func (e *localError) Error() string { return e.err.Error() + " (local " + e.local + ")" }
func (e *localError) Unwrap() error { return e.err }
