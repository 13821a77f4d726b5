package handoff

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// A fresh listen that reuseport refuses is one *net.OpError: its text names
// the operation and the address once ("listen tcp4 A: ..."), not twice.
func TestListenErrorWrappedOnce(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		hold, err := net.Listen("tcp4", "127.0.0.1:0") // no SO_REUSEPORT
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		u, err := New(ctx, Config{Path: handoffPath(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		_, err = u.Listen(ctx, "http", "tcp4", hold.Addr().String())
		var oe *net.OpError
		if !errors.As(err, &oe) || !errors.Is(err, reuseport.ErrNotReusable) {
			t.Fatalf("Listen on a held port: %v, want a *net.OpError matching ErrNotReusable", err)
		}
		if n := strings.Count(err.Error(), "listen tcp4 "+hold.Addr().String()); n != 1 || errors.As(oe.Err, new(*net.OpError)) {
			t.Fatalf("%q names the listen %d times, want once", err, n)
		}
	})
}
