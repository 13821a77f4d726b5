package zerodrop_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"

	"github.com/zerodrop/zerodrop"
)

// A server that serves until its ctx ends, then drains. With Config.Handoff
// set, a second process started with the same options would take its
// listener over instead, and this one would drain when it is ready.
func ExampleServe() {
	ctx, cancel := context.WithCancel(context.Background())
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "hello\n")
	})}
	rep, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0"}, zerodrop.Options{Config: zerodrop.Config{
		OnServing: func(gen uint64, addrs []net.Addr) {
			defer cancel() // stop once we have been answered
			resp, err := http.Get("http://" + addrs[0].String() + "/")
			if err != nil {
				log.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			fmt.Printf("generation %d answered %s", gen, b)
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	d := rep.Drains[0]
	fmt.Printf("stopped: %s; queued connections lost: %d; requests cut: %d\n", rep.Cause, d.Remainder, len(d.HTTP.Forced))
	// Output:
	// generation 1 answered hello
	// stopped: context canceled; queued connections lost: 0; requests cut: 0
}

// A server of another kind than http.Server on a Generation: here an echo
// server on the raw listener, which stops when its ctx ends. Wait returns
// why it must stop; the listener is the server's to close (a real one
// drains it: drain.Wrap keeps its queue).
func ExampleOpen() {
	ctx, cancel := context.WithCancel(context.Background())
	g, err := zerodrop.Open(ctx, []string{"127.0.0.1:0"}, zerodrop.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	l := g.Listeners()[0]
	served := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed at the stop
			}
			io.Copy(c, c)
			c.Close()
		}
	}()
	if err := g.Ready("echo serving"); err != nil { // no systemd, no predecessor: nothing to tell
		log.Fatal(err)
	}
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(c, "hello")
	c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	c.Close()
	fmt.Printf("generation %d echoed %q\n", g.Number(), b)
	cancel()
	cause, _, _ := g.Wait(ctx, served)
	g.Stopping(cause)
	l.Close()
	fmt.Println("stopped:", cause)
	// Output:
	// generation 1 echoed "hello\n"
	// stopped: context canceled
}
