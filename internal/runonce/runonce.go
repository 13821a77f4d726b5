// Package runonce runs a function once for many callers: the first caller
// runs it, the others wait for its result, each for as long as its own
// context lets it. drain.Server.Shutdown and grpcdrain.Server.Shutdown are
// such calls.
package runonce

import (
	"context"
	"sync"
)

// Call is one function run once. Its zero value is ready to use.
type Call[T any] struct {
	mu   sync.Mutex
	done chan struct{} // nil before the first Do; closed once f returned
	v    T
	err  error
}

// Do runs f if it is the first Do, and returns f's results with ok true.
// A later Do returns the same results, waiting for them while f runs; if
// ctx ends first, it returns the zero T, ctx.Err() and ok false (f goes on).
// A result ready and a ctx ended at once give the result.
func (c *Call[T]) Do(ctx context.Context, f func() (T, error)) (v T, err error, ok bool) {
	c.mu.Lock()
	done, first := c.done, c.done == nil
	if first {
		c.done = make(chan struct{})
		done = c.done
	}
	c.mu.Unlock()
	if first {
		c.v, c.err = f()
		close(done)
		return c.v, c.err, true
	}
	select {
	case <-done:
	default:
		select {
		case <-done:
		case <-ctx.Done():
			var zero T
			return zero, ctx.Err(), false
		}
	}
	return c.v, c.err, true
}

// Started reports whether Do has been called.
func (c *Call[T]) Started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done != nil
}
