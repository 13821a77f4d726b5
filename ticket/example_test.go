package ticket_test

import (
	"context"
	"crypto/tls"
	"log"
	"net/http"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/ticket"
)

// A service that wires handoff and drain by hand: its keys come from the
// predecessor (New imports them) and go to the successor, and its TLS
// config issues and accepts tickets with them. zerodrop.Serve does all of
// this for a server with a TLSConfig. Compile-only: it needs a certificate,
// a handoff directory under /run (root's) and a successor process.
func Example() {
	ctx := context.Background()
	keys, err := ticket.New()
	if err != nil {
		log.Fatal(err)
	}
	defer keys.Close() // zeroes them, once the drain is over
	u, err := handoff.New(ctx, handoff.Config{Path: "/run/app/handoff.sock", TicketKeys: keys})
	if err != nil {
		log.Fatal(err)
	}
	defer u.Close()
	ln, err := u.Listen(ctx, "https", "tcp", ":8443")
	if err != nil {
		log.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair("cert.pem", "key.pem")
	if err != nil {
		log.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if err := keys.Install(cfg); err != nil {
		log.Fatal(err)
	}
	ds := &drain.Server{HTTP: &http.Server{TLSConfig: cfg}}
	go ds.ServeTLS(ln, "", "")
	if err := u.Ready(); err != nil {
		log.Fatal(err)
	}
	<-u.Exit() // a successor serves, with our keys
	ds.Shutdown(ctx)
}
