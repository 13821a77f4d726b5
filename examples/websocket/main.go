// Command websocket is a WebSocket echo server that tells its clients it is
// going away when it stops: drain.GoingAway, as drain.Server's Hijacked
// callback, sends each open WebSocket the close frame 1001 "going away" once
// the listener has stopped, and gives it a deadline.
//
//	go run ./websocket -addr 127.0.0.1:8080    # SIGTERM or SIGINT stops it
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
)

// newServer is the echo server; closeIn bounds each WebSocket's end once the
// drain has told it to go away.
func newServer(closeIn time.Duration) *drain.Server {
	up := websocket.Upgrader{}
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return // Upgrade has answered
		}
		defer c.Close()
		for {
			typ, msg, err := c.ReadMessage() // answers the client's close frame, then fails
			if err != nil {
				return
			}
			if err := c.WriteMessage(typ, msg); err != nil {
				return
			}
		}
	})
	return &drain.Server{HTTP: &http.Server{Handler: echo, ReadHeaderTimeout: 10 * time.Second}, Hijacked: drain.GoingAway(closeIn)}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	l, err := reuseport.Listen(context.Background(), "tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := newServer(2 * time.Second)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	fmt.Println("serving", l.Addr().(*net.TCPAddr))
	select {
	case <-stop:
	case err := <-served:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := srv.Shutdown(ctx)
	json.NewEncoder(os.Stdout).Encode(rep)
	<-served
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
