package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop/bench/internal/worker/quicworker"
)

// quicSpecs are the HTTP/3 contenders, the Go workers of mode "quic"
// (package internal/worker/quicworker), run with -h3 only.
func quicSpecs() []spec {
	return []spec{
		{name: "h3-naive", h3: true, h3Only: true,
			about: "HTTP/3, quic-go: stop the process (http3.Server.Shutdown: GOAWAY, bounded by 5 s), start a new one that binds the UDP port again",
			make:  func() contender { return &quicContender{variant: "plain"} }},
		{name: "h3-pass", h3: true, h3Only: true,
			about: "HTTP/3, the socket-passing control: the UDP socket handed over (package handoff), quic-go started on it in the successor (fixed stateless reset key), then http3.Server.Shutdown in the predecessor",
			make:  func() contender { return &quicContender{variant: "pass"} }},
		{name: "zd-h3", h3: true, h3Only: true,
			about: "zerodrop: quicdrain (one process upgraded by handoff; the successor reads the UDP socket and forwards the predecessor's datagrams to it, which sends GOAWAY and exits once its clients left)",
			make:  func() contender { return &quicContender{variant: "zerodrop"} }},
		{name: "h3-reuseport", h3: true, h3Only: true,
			about: "HTTP/3, quic-go: 4 SO_REUSEPORT workers on the UDP port rolled (start the new one, then http3.Server.Shutdown in the old one; the group changes at each step), fixed stateless reset key",
			make:  func() contender { return newQUICPool("reuseport") }},
		{name: "zd-h3-pool", h3: true, h3Only: true,
			about: "zerodrop: 4 quicdrain slots on the UDP port (a reuseport group), each a lineage upgraded by handoff in turn: its socket passes to the successor, so the group never changes, and the successor forwards its predecessor's datagrams",
			make:  func() contender { return newQUICPool("zerodrop") }},
	}
}

// quicPool is 4 quic workers of one variant on the port, rolled one at a
// time: "reuseport" as pool rolls (start, then stop), "zerodrop" by the
// slot's successor, which takes the slot's socket over (handoff), after
// which the predecessor stops by itself.
type quicPool struct {
	pool
	variant string
}

func newQUICPool(variant string) *quicPool {
	return &quicPool{variant: variant, pool: pool{mode: "quic", n: 4, slotEnv: func(i int) []string {
		return []string{quicworker.EnvVariant + "=" + variant, quicworker.EnvSlot + "=" + strconv.Itoa(i)}
	}}}
}

func (c *quicPool) restart(ctx context.Context, mark func(string)) error {
	if c.variant != "zerodrop" {
		return c.pool.restart(ctx, mark)
	}
	i := c.next % len(c.workers)
	c.next++
	p, err := c.env.startWorker(ctx, c.mode, c.env.nextGen(), c.envOf(i))
	if err != nil {
		return err
	}
	old := c.workers[i]
	c.workers[i] = p
	mark("roll") // p is ready: old is stopping
	return old.wait(ctx)
}

// quicContender is a worker of mode "quic" and its variant: "plain" restarts
// by a stop and a start, "pass" and "zerodrop" by a successor that takes the
// socket over (handoff), after which the predecessor stops by itself.
type quicContender struct {
	variant string
	run     *runEnv
	cur     *proc
}

func (c *quicContender) env() []string { return []string{quicworker.EnvVariant + "=" + c.variant} }

func (c *quicContender) start(ctx context.Context, env *runEnv) (err error) {
	c.run = env
	c.cur, err = env.startWorker(ctx, "quic", env.nextGen(), c.env())
	return err
}

func (c *quicContender) restart(ctx context.Context, mark func(string)) error {
	if c.variant == "plain" {
		mark("restart")
		if err := c.cur.stop(ctx); err != nil {
			return err
		}
		next, err := c.run.startWorker(ctx, "quic", c.run.nextGen(), c.env())
		if err != nil {
			return err
		}
		c.cur = next
		return nil
	}
	next, err := c.run.startWorker(ctx, "quic", c.run.nextGen(), c.env())
	if err != nil {
		return err
	}
	mark("handoff") // next is ready: the predecessor is stopping
	old := c.cur
	c.cur = next
	return old.wait(ctx)
}

func (c *quicContender) stop(ctx context.Context) error { return c.cur.stop(ctx) }

// quicCount sums what the quic workers report at exit ("quic <pid>
// <forwarded> <told> <finished> <forced> <why>"): the connections forced
// when the harness stopped the last workers (why "stop") apart.
type quicCount struct {
	forwarded, told, finished, forced, forcedAtStop atomic.Int64
}

// parse adds a "quic" line's fields, and says whether f was one.
func (q *quicCount) parse(f []string) bool {
	if len(f) != 7 || f[0] != "quic" {
		return false
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(f[2+i], 10, 64)
		if err != nil {
			return true
		}
		v[i] = n
	}
	q.forwarded.Add(v[0])
	q.told.Add(v[1])
	q.finished.Add(v[2])
	if f[6] == "stop" {
		q.forcedAtStop.Add(v[3])
	} else {
		q.forced.Add(v[3])
	}
	return true
}

// quicResult is what the HTTP/3 workers and clients of a run reported.
type quicResult struct {
	// Forwarded counts the datagrams successors forwarded to their
	// predecessors (zd-h3); Told, Finished and Forced the connections
	// the quicdrain generations sent a GOAWAY, saw leave, and closed at
	// the grace.
	Forwarded int64 `json:"forwarded"`
	Told      int64 `json:"told"`
	Finished  int64 `json:"finished"`
	Forced    int64 `json:"forced"`
	// ForcedAtStop counts the connections the last workers closed when
	// the harness stopped them, after the load (not a restart's).
	ForcedAtStop int64 `json:"forced_at_stop"`
	// Retried counts the requests quic-go's client sent again after the
	// server rejected them (H3_REQUEST_REJECTED, which RFC 9114 §4.1.2
	// guarantees the server did not process: quic-go retries nothing else).
	Retried int64 `json:"retried"`
	// Resets counts the requests that failed with a stateless reset of
	// their connection (quic.StatelessResetError), as the clients saw it.
	Resets int64 `json:"stateless_resets"`
}

// result returns the run's quicResult: the workers' reports (read to the
// end of their stdout: call it after handshakes) and the clients' resets.
func (q *quicCount) result(c *h3Count) *quicResult {
	return &quicResult{Forwarded: q.forwarded.Load(), Told: q.told.Load(), Finished: q.finished.Load(),
		Forced: q.forced.Load(), ForcedAtStop: q.forcedAtStop.Load(), Resets: c.resets.Load(), Retried: c.retried.Load()}
}

// h3Count is what the HTTP/3 clients count: requests failed by a
// stateless reset, and requests sent again.
type h3Count struct{ resets, retried atomic.Int64 }

// h3Timeout is the clients' QUIC idle and handshake timeout: it bounds a
// request on a connection its server lost, as the load's Timeout does.
const h3Timeout = 5 * time.Second

// h3RoundTripper returns the load's round tripper maker for HTTP/3:
// quic-go's http3.Transport, which counts in c the requests that failed
// with a stateless reset and those it sent again.
func h3RoundTripper(cnt *h3Count) func(*tls.Config) http.RoundTripper {
	return func(c *tls.Config) http.RoundTripper {
		tr := &http3.Transport{TLSClientConfig: c,
			QUICConfig: &quic.Config{MaxIdleTimeout: h3Timeout, HandshakeIdleTimeout: h3Timeout}}
		return &resetCounter{tr: tr, c: cnt}
	}
}

// resetCounter counts the stateless resets under its requests' errors,
// those of RoundTrip and of reading the body. It gives a POST without a
// GetBody (load.Config.Post) one that counts in c.retried: quic-go sends a
// request again only when the server rejected it unprocessed
// (H3_REQUEST_REJECTED), and only if it can rewind the body, as it can
// any body given as bytes.
type resetCounter struct {
	tr *http3.Transport
	c  *h3Count
}

func (r *resetCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && req.GetBody == nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
		req.GetBody = func() (io.ReadCloser, error) {
			r.c.retried.Add(1)
			return io.NopCloser(bytes.NewReader(b)), nil
		}
	}
	resp, err := r.tr.RoundTrip(req)
	if err != nil {
		r.count(err)
		return nil, err
	}
	resp.Body = &resetBody{ReadCloser: resp.Body, rc: r}
	return resp, nil
}

func (r *resetCounter) count(err error) {
	var se *quic.StatelessResetError
	if errors.As(err, &se) || strings.Contains(err.Error(), "received a stateless reset") {
		r.c.resets.Add(1)
	}
}

// Close closes the transport's connections.
func (r *resetCounter) Close() error { return r.tr.Close() }

type resetBody struct {
	io.ReadCloser
	rc *resetCounter
}

func (b *resetBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.rc.count(err)
	}
	return n, err
}
