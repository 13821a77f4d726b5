package load

import (
	"crypto/tls"
	"net/http"
	"sync/atomic"
	"testing"
)

// countingRT is a Config.RoundTripper's round tripper: it counts the
// requests it sends and whether it was closed.
type countingRT struct {
	tr     *http.Transport
	sent   *atomic.Int64
	closed *atomic.Int64
}

func (c countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.sent.Add(1)
	return c.tr.RoundTrip(r)
}

func (c countingRT) Close() error {
	c.closed.Add(1)
	c.tr.CloseIdleConnections()
	return nil
}

// Config.RoundTripper's round trippers send every request, one per
// StreamsPerConn workers, each given the run's TLS configuration, and are
// closed at the end of the run.
func TestRoundTripper(t *testing.T) {
	srv := okServer(t)
	var made, sent, closed atomic.Int64
	var sawTLS atomic.Bool
	rt := func(c *tls.Config) http.RoundTripper {
		made.Add(1)
		sawTLS.Store(c != nil)
		return countingRT{tr: &http.Transport{}, sent: &sent, closed: &closed}
	}
	res := run(t, t.Context(), Config{URL: srv.URL + "/", Concurrency: 6, StreamsPerConn: 4, Requests: 40, Post: true,
		RoundTripper: rt, Header: "X-Generation"})
	if res.Requests != 40 || res.Failed != 0 || res.Headers["7"] != 40 {
		t.Fatalf("requests %d failed %d headers %v errors %v; want 40 ok from generation 7", res.Requests, res.Failed, res.Headers, res.Errors)
	}
	if made.Load() != 2 || sent.Load() != 40 || closed.Load() != 2 {
		t.Errorf("%d round trippers made, %d requests sent through them, %d closed; want 2, 40, 2", made.Load(), sent.Load(), closed.Load())
	}
	if sawTLS.Load() {
		t.Error("an http URL gave the round tripper a TLS configuration")
	}
	if _, err := New(Config{URL: srv.URL, RoundTripper: rt, Pool: 2}); err == nil {
		t.Error("RoundTripper with Pool: no error")
	}
}
