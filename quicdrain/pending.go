package quicdrain

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// handshake is a connection quic-go created (its first Initial was
// processed) that nobody accepted yet.
type handshake struct {
	once    sync.Once
	pending *atomic.Int64
}

func (h *handshake) done() { h.once.Do(func() { h.pending.Add(-1) }) }

type handshakeKey struct{}

// connContext is the Transport's ConnContext: it counts the connection as
// a handshake under way until it is accepted (accepted) or ends.
func (g *Gen) connContext(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	h := &handshake{pending: &g.pending}
	g.pending.Add(1)
	context.AfterFunc(ctx, h.done)
	return context.WithValue(ctx, handshakeKey{}, h), nil
}

// Accepted tells g that conn, which a listener on g's Transport accepted,
// is no longer a handshake under way (WaitHandshakes). ServeHTTP3 calls it.
func (g *Gen) Accepted(conn *quic.Conn) { accepted(conn) }

// accepted marks conn's handshake done.
func accepted(conn *quic.Conn) {
	if h, ok := conn.Context().Value(handshakeKey{}).(*handshake); ok {
		h.done()
	}
}
