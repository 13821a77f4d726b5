package tlstest

import (
	"context"
	"net"
	"testing"
	"time"
)

// Taker is a connection that can be proven idle and taken with its state
// S (a *tlsresume.Recorder, whose S is *tlsresume.State).
type Taker[S any] interface {
	ProveIdleHTTP() error
	Take(ctx context.Context) (net.Conn, S, error)
}

// Take proves r (bounded, as Retry) and takes it (within 10 s), failing
// the test otherwise.
func Take[S any](t testing.TB, r Taker[S]) (net.Conn, S) {
	t.Helper()
	if err := Retry(r.ProveIdleHTTP); err != nil {
		t.Fatalf("not proven: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, st, err := r.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return raw, st
}
