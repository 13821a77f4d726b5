package load

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// Config describes a run. Its zero value, with URL set, means one closed-loop
// worker opening a new connection per request for 10 seconds.
type Config struct {
	// URL is the target, "http://host:port/path", or "https://..." for
	// TLS. Required.
	URL string

	// TLS is the client's TLS configuration for an https URL (nil: a zero
	// tls.Config, the system's roots), in every mode: a handshake per
	// request with a new connection per request, one per connection kept
	// alive. Its ServerName defaults to the URL's host. Set with an http
	// URL, it is an error. With a ClientSessionCache, the hand-written
	// client (HTTP/1.1, Transport false) keeps a session cache per worker
	// instead (the one given is not used): a connection takes one as it is
	// dialled and gives it back when dropped, so a reconnection offers the
	// ticket of a connection before it, as each of many distinct clients
	// would, and each worker's first connection has none.
	TLS *tls.Config

	// HTTP2 sends the requests over HTTP/2, which needs an https URL:
	// net/http's Transport speaking HTTP/2 only, StreamsPerConn workers
	// sharing each Transport and so its one connection, many streams on
	// few connections. A request fails as the Transport returns it; those
	// it sent more than once (after a GOAWAY or a refused stream, on
	// another connection) are counted in Result.Retried. KeepAlive and
	// Transport do not apply; Pool must not be set.
	HTTP2 bool

	// Post makes every request a POST of a small body (a few bytes, with its
	// Content-Length) instead of a GET, one net/http's Transport cannot
	// replay: GetBody is nil and the Body is a plain io.Reader, as a body
	// streamed from a file or a pipe is (http.NewRequest sets GetBody only
	// for a *bytes.Buffer, *bytes.Reader or *strings.Reader). Over HTTP/1.1
	// the Transport then never sends it twice. With HTTP2 a request fails,
	// class Other, where a GET would count in Result.Retried: its stream
	// refused or left above a GOAWAY's last stream id ("http2: Transport:
	// cannot retry err [...] after Request.Body was written"), or its
	// connection found gone away (a GOAWAY received) after the request
	// chose it but before its stream opened, nothing of it sent ("net/http:
	// cannot rewind body after connection loss": net/http closed the body
	// and cannot get it again); it is sent again only when the Transport
	// has another connection at hand at once. The hand-written client,
	// which never retries, writes the same POST. A pool (Pool) always
	// POSTs.
	Post bool

	// RoundTripper, when set, makes the round trippers the requests are
	// sent through instead of net/http's Transport, such as quic-go's
	// http3.Transport for HTTP/3 (which this module does not link): one per
	// StreamsPerConn workers, as with HTTP2, each given the run's TLS
	// configuration (with ServerName set) to use. A request fails as the
	// round tripper returns it. Those that implement CloseIdleConnections
	// or io.Closer are closed at the end of the run. HTTP2, Transport,
	// KeepAlive and Dial do not apply; Pool must not be set.
	RoundTripper func(tls *tls.Config) http.RoundTripper

	// StreamsPerConn is, with HTTP2 or RoundTripper, how many workers share one Transport
	// (default 8): Concurrency / StreamsPerConn connections, rounded up,
	// each carrying up to StreamsPerConn streams at once.
	StreamsPerConn int

	// Concurrency is the number of workers in a closed-loop run (default 1),
	// or the most requests in flight in an open-loop run (default 1024); a due
	// arrival waits for a free slot, and the wait counts in its latency.
	Concurrency int

	// Rate, when positive, makes the run open-loop: this many requests are
	// sent per second, evenly spaced.
	Rate float64

	// Duration bounds the time during which new requests are sent (default
	// 10 s). Requests in flight then finish, each within Timeout.
	Duration time.Duration

	// Requests, when positive, bounds the number of requests sent.
	Requests int64

	// Timeout bounds each request, dial included (default 2 s, longer than the
	// kernel's first SYN retransmit at 1 s).
	Timeout time.Duration

	// KeepAlive reuses connections instead of opening one per request. The
	// hand-written client never retries: a request sent on a connection the
	// server has just closed fails (eof or reset), as it would for any client
	// that does not retry.
	KeepAlive bool

	// Transport sends requests through net/http's Transport instead of the
	// hand-written client that never retries.
	Transport bool

	// Pool, when positive, makes the run a sparse keep-alive pool: this
	// many clients, each with a net/http Transport of its own that keeps
	// one connection, each sending a POST (with a body and no GetBody, so
	// never retried) at random intervals in [PoolMin, PoolMax], open loop,
	// idle in between. Concurrency, Rate, KeepAlive and Transport do not
	// apply; Requests and Duration do.
	Pool int

	// PoolMin and PoolMax bound a pool client's interval between two
	// requests (default 50 ms and 500 ms).
	PoolMin, PoolMax time.Duration

	// Header names a response header (such as "X-Generation") whose values
	// are counted over ok replies, in total and per bucket.
	Header string

	// Bucket is the width of the timeline's buckets (default 100 ms).
	Bucket time.Duration

	// Window is how far around a mark buckets count as around it (default
	// 200 ms).
	Window time.Duration

	// Dial opens connections (default: a net.Dialer, plain TCP). Set it to
	// dial from another network namespace, for example.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// withDefaults checks c and returns it with defaults filled in, and the
// parsed URL.
func (c Config) withDefaults() (Config, *url.URL, error) {
	u, err := url.Parse(c.URL)
	if err != nil {
		return c, nil, fmt.Errorf("load: parse URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return c, nil, fmt.Errorf("load: URL %q: want http://host:port/path or https://host:port/path", c.URL)
	}
	if c.Concurrency < 0 || c.Rate < 0 || c.Duration < 0 || c.Requests < 0 || c.StreamsPerConn < 0 ||
		c.Timeout < 0 || c.Bucket < 0 || c.Window < 0 || c.Pool < 0 || c.PoolMin < 0 || c.PoolMax < 0 {
		return c, nil, errors.New("load: negative value in Config")
	}
	switch {
	case u.Scheme == "http" && c.TLS != nil:
		return c, nil, fmt.Errorf("load: TLS set with the http URL %q", c.URL)
	case u.Scheme == "http" && c.HTTP2:
		return c, nil, fmt.Errorf("load: HTTP2 needs an https URL, not %q", c.URL)
	case c.HTTP2 && c.Pool > 0:
		return c, nil, errors.New("load: HTTP2 and Pool both set")
	case c.RoundTripper != nil && c.Pool > 0:
		return c, nil, errors.New("load: RoundTripper and Pool both set")
	case u.Scheme == "https":
		c.TLS = clientTLS(c.TLS, u)
	}
	if c.StreamsPerConn == 0 {
		c.StreamsPerConn = 8
	}
	if c.Pool > 0 {
		if c.Rate > 0 {
			return c, nil, errors.New("load: Pool and Rate both set")
		}
		c.PoolMin = orDefault(c.PoolMin, 50*time.Millisecond)
		c.PoolMax = orDefault(c.PoolMax, 500*time.Millisecond)
		if c.PoolMax < c.PoolMin {
			return c, nil, fmt.Errorf("load: PoolMax %v below PoolMin %v", c.PoolMax, c.PoolMin)
		}
	}
	switch {
	case c.Concurrency > 0:
	case c.Rate > 0:
		c.Concurrency = 1024
	default:
		c.Concurrency = 1
	}
	c.Duration = orDefault(c.Duration, 10*time.Second)
	c.Timeout = orDefault(c.Timeout, 2*time.Second)
	c.Bucket = orDefault(c.Bucket, 100*time.Millisecond)
	c.Window = orDefault(c.Window, 200*time.Millisecond)
	c.Header = http.CanonicalHeaderKey(c.Header)
	if c.Dial == nil {
		c.Dial = (&net.Dialer{}).DialContext
	}
	return c, u, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// clientTLS returns a copy of cfg (or a zero config) whose ServerName is
// u's host if it had none.
func clientTLS(cfg *tls.Config, u *url.URL) *tls.Config {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg = cfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	return cfg
}
