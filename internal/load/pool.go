package load

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// A pool is Config.Pool clients, each with an http.Transport of its own that
// keeps one connection alive (MaxConnsPerHost 1), as a reverse proxy's
// upstream pool does. Each sends a POST with a body and no GetBody, which the
// Transport never retries, so every failure the server causes is counted.
type pool struct {
	members []*member
	n       *counts
}

// member is one client of a pool.
type member struct {
	tr     *http.Transport
	u      *url.URL
	header string
	id     string
	n      int // requests sent, for the body
	p      *pool
}

func newPool(c Config, u *url.URL, n *counts) *pool {
	p := &pool{members: make([]*member, c.Pool), n: n}
	for i := range p.members {
		tr := newTransport(c, false)
		tr.MaxConnsPerHost = 1
		tr.MaxIdleConnsPerHost = 1
		// The connection stays open between requests, however long the
		// gap: only the server may close it.
		tr.IdleConnTimeout = 0
		p.members[i] = &member{tr: tr, u: u, header: c.Header, id: strconv.Itoa(i), p: p}
	}
	return p
}

// do sends one POST on m's connection (dialling it if there is none). A
// member is used by one goroutine at a time.
func (m *member) do(ctx context.Context) (string, error) {
	m.n++
	// GetBody nil: the Transport cannot replay the request, so it never
	// retries it on another connection.
	body := []byte("zerodrop-load pool client " + m.id + " request " + strconv.Itoa(m.n) + "\n")
	req := postRequest(ctx, m.u, bytes.NewReader(body), len(body))
	return roundTrip(m.tr, req, m.header, m.p.n)
}

func (p *pool) close() {
	for _, m := range p.members {
		m.tr.CloseIdleConnections()
	}
}

// poolLoop starts one goroutine per member of the pool, each sending while
// sending lasts.
func (g *Generator) poolLoop(ctx, sending context.Context, wg *sync.WaitGroup) {
	for i, m := range g.pool.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.member(ctx, sending, m, uint64(i))
		}()
	}
}

// member runs one client of the pool, open loop: its requests are due at
// random intervals in [PoolMin, PoolMax] whatever the server's pace. They
// go out one at a time on the client's one connection, so a request due
// while the one before is still in flight waits, and the wait counts in its
// latency.
func (g *Generator) member(ctx, sending context.Context, m *member, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x7a64))
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var due time.Duration
	for {
		due += g.cfg.PoolMin + time.Duration(r.Int64N(int64(g.cfg.PoolMax-g.cfg.PoolMin)+1))
		if !g.waitUntil(sending, t, due) {
			return
		}
		if ended(sending) || !g.take() {
			return
		}
		g.one(ctx, g.rec.begin(due), due, m.do)
	}
}
