// Command websocket is a WebSocket echo server that upgrades through handoff
// on SIGHUP and tells its clients it is going away when a generation stops:
// drain.GoingAway, as drain.Server.Hijacked (through zerodrop.Options.Drain), sends each open WebSocket
// the close frame 1001 "going away" once the listener has stopped (passed to
// the successor, or closed at SIGTERM or SIGINT), and gives it -close-in to
// end. The generation then waits for its WebSockets to end before it exits,
// so that none is cut without its close frame; new connections go to the
// successor meanwhile. The handshake's answer names the generation in the
// header X-Generation.
//
//	go build -o /tmp/websocket ./websocket && /tmp/websocket -addr 127.0.0.1:8080
//	kill -HUP $(cat /tmp/zerodrop-websocket-$(id -u)/websocket.pid)    # upgrade
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
)

// config is the command line.
type config struct {
	addr, socket   string
	grace, closeIn time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("zerodrop-websocket-%d", os.Geteuid()))
	c := &config{}
	fs := flag.NewFlagSet("websocket", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (the first generation)")
	fs.StringVar(&c.socket, "socket", filepath.Join(dir, "handoff.sock"),
		"handoff socket; its directory is created 0700, and websocket.pid goes next to it")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "bound on the drain")
	fs.DurationVar(&c.closeIn, "close-in", 2*time.Second,
		"how long a WebSocket told to go away has to end before it is closed")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.closeIn <= 0 || c.closeIn >= c.grace {
		return nil, fmt.Errorf("-close-in %v: want more than 0 and less than -grace %v", c.closeIn, c.grace)
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "websocket example:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "websocket example:", err)
		os.Exit(1)
	}
}

// run serves one generation with zerodrop.Serve: it inherits or creates the
// listener, starts a successor (this executable, our arguments) on SIGHUP,
// and drains once the successor is ready, on SIGTERM or SIGINT, or when ctx
// ends; then it waits for the WebSockets told to go away.
func run(ctx context.Context, c *config, out io.Writer) error {
	dir := filepath.Dir(c.socket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	e := &echo{}
	rep, err := zerodrop.Serve(ctx, newHTTPServer(e), []string{c.addr}, zerodrop.Options{
		Config: zerodrop.Config{
			Handoff:   handoff.Config{Path: c.socket, PIDFile: filepath.Join(dir, "websocket.pid")},
			Successor: zerodrop.ReExec,
			Grace:     c.grace,
			OnListen:  func(g uint64, _ []net.Addr) { e.gen.Store(g) },
			OnServing: func(g uint64, addrs []net.Addr) {
				fmt.Fprintf(out, "generation %d serving %s pid %d\n", g, addrs[0], os.Getpid())
			},
		},
		Drain: func(_ string, s *drain.Server) { s.Hijacked = drain.GoingAway(c.closeIn) },
	})
	// GoingAway closes each WebSocket after closeIn; a second more is for
	// the handlers to return.
	left := e.wait(c.closeIn + time.Second)
	if rep != nil && len(rep.Drains) > 0 && rep.Drains[0] != nil {
		d := rep.Drains[0]
		fmt.Fprintf(out, "generation %d stopped: %s, %d websockets told to go away, %d forced, %d still open\n",
			rep.Generation, d.Method, d.HTTP.HijackedNotified, len(d.HTTP.Forced), left)
	}
	return err
}

// newHTTPServer is the http.Server of h.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
}

// echo upgrades every request to a WebSocket, answering with the generation
// in X-Generation, and echoes each message on it until it ends.
type echo struct {
	gen  atomic.Uint64
	up   websocket.Upgrader
	open sync.WaitGroup // the WebSockets being served
	n    atomic.Int64   // how many
}

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.open.Add(1)
	e.n.Add(1)
	defer func() { e.n.Add(-1); e.open.Done() }()
	c, err := e.up.Upgrade(w, r, http.Header{"X-Generation": {strconv.FormatUint(e.gen.Load(), 10)}})
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
}

// wait waits up to timeout for every WebSocket to end and returns how many
// are still open.
func (e *echo) wait(timeout time.Duration) int64 {
	done := make(chan struct{})
	go func() { e.open.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
	}
	return e.n.Load()
}
