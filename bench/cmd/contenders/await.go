package main

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// served is what a server outside our own workers answered: its generation
// (X-Generation, from the configuration) and, where the server can say it,
// the PID of the worker process that answered (X-Worker).
type served struct {
	gen, worker string
}

// awaitGen polls env's address until it is answered by generation gen, for
// readyTimeout at most, and returns that answer. Over TLS it trusts only the
// run's certificate. exited closes if the server's main process exits, and
// exitErr then says why. A reload command's exit status says nothing about
// what serves: this is the check from outside.
func awaitGen(ctx context.Context, env *runEnv, exited <-chan struct{}, exitErr func() error, gen string) (served, error) {
	scheme := "http"
	if env.clientTLS != nil {
		scheme = "https"
	}
	cl := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: env.clientTLS}}
	defer cl.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last served
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", scheme+"://"+env.addr+"/", nil)
		if resp, err := cl.Do(req); err == nil {
			resp.Body.Close()
			last = served{gen: resp.Header.Get("X-Generation"), worker: resp.Header.Get("X-Worker")}
			if last.gen == gen {
				return last, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("generation %s not serving (last seen %q): %w", gen, last.gen, ctx.Err())
		case <-exited:
			return last, fmt.Errorf("exited: %v", exitErr())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
