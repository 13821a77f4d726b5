package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// demoServer is an HTTP server on 127.0.0.1 that replies with its generation
// in X-Generation, and can be restarted the naive way: close, listen again.
type demoServer struct {
	addr string
	gen  atomic.Int64
	srv  *http.Server
	done chan struct{}
}

func startDemo() (*demoServer, error) {
	d := &demoServer{addr: "127.0.0.1:0"}
	if err := d.listen(); err != nil {
		return nil, err
	}
	return d, nil
}

// listen starts the next generation on d.addr.
func (d *demoServer) listen() error {
	ln, err := net.Listen("tcp", d.addr)
	if err != nil {
		return fmt.Errorf("demo server: %w", err)
	}
	d.addr = ln.Addr().String()
	gen := strconv.FormatInt(d.gen.Add(1), 10)
	d.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Generation", gen)
		w.Write([]byte("ok\n"))
	})}
	d.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		srv.Serve(ln)
	}(d.srv, d.done)
	return nil
}

func (d *demoServer) close() {
	d.srv.Close()
	<-d.done
}

// restartEvery restarts the server every period until ctx ends, calling mark
// just before each restart.
func (d *demoServer) restartEvery(ctx context.Context, period time.Duration, mark func(string)) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		mark("restart")
		d.close()
		if err := d.listen(); err != nil {
			return err
		}
	}
}
