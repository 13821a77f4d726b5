package quicdrain

import (
	"context"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// Report is what Shutdown did.
type Report struct {
	// Stats are the generation's counters once it closed.
	Stats Stats
	// HandoverError is why the successor was not told (it then reads the
	// socket after its Config.HandoverTimeout, without our table).
	HandoverError error
	// Forced is true when ctx ended before every connection had left: the
	// rest were closed (srv.Close).
	Forced bool
	// Took is how long Shutdown took.
	Took time.Duration
}

// HandshakeQuiet is how long Shutdown waits without an Initial or
// Handshake datagram before the GOAWAY.
const HandshakeQuiet = 200 * time.Millisecond

// Shutdown stops generation g serving srv once its successor is ready
// (handoff's Exit): Handover (the successor reads the socket from now on
// and forwards us the datagrams of our connections), WaitHandshakes (the
// handshakes the successor forwards finish), srv.Shutdown (an HTTP/3
// GOAWAY on every connection; requests already sent are answered, later
// ones rejected with H3_REQUEST_REJECTED, which clients retry elsewhere;
// each client closes its connection once its streams are done), bounded by
// ctx: when it ends, srv.Close closes the connections left. Then it closes
// g, which stops the forwarding to it.
func Shutdown(ctx context.Context, g *Gen, srv *http3.Server) Report {
	start := time.Now()
	var r Report
	r.HandoverError = g.Handover(ctx)
	g.WaitHandshakes(ctx, HandshakeQuiet)
	if err := srv.Shutdown(ctx); err != nil {
		r.Forced = ctx.Err() != nil
	}
	g.Close()
	r.Stats = g.Stats()
	r.Took = time.Since(start)
	return r
}
