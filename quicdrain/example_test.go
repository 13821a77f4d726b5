package quicdrain_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop/handoff"
	quicdrain "github.com/zerodrop/zerodrop/quicdrain"
)

// An HTTP/3 server that a deploy restarts by starting the same binary: the
// new process inherits the UDP socket, the old one hands over, tells its
// clients to go away, and exits once they left (at most 30 s).
// Compile-only: it needs a certificate, directories under /run (root's) and
// a successor process.
func ExampleServeHTTP3() {
	ctx := context.Background()
	u, err := handoff.New(ctx, handoff.Config{Path: "/run/app/handoff.sock"})
	if err != nil {
		panic(err)
	}
	defer u.Close()
	g, err := quicdrain.Listen(ctx, u, "h3", "udp", ":443", quicdrain.Config{Dir: "/run/app/quic"})
	if err != nil {
		panic(err)
	}
	cert, _ := tls.LoadX509KeyPair("cert.pem", "key.pem")
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "generation %d\n", g.Generation())
		}),
	}
	h3, err := quicdrain.ServeHTTP3(g, srv) // listen before Start
	if err != nil {
		panic(err)
	}
	if err := u.Ready(); err != nil { // the predecessor's Exit closes
		panic(err)
	}
	if err := g.Start(ctx); err != nil { // its handover, then we read
		panic(err)
	}
	// A deploy starts the new binary; it runs this same code.
	<-u.Exit() // a successor is ready
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep := h3.Shutdown(gctx)
	fmt.Printf("told %d, finished %d, forced %d, forwarded %d datagrams\n",
		rep.Told, rep.Finished, rep.Forced, rep.Stats.Forwarded)
}
