package handoff

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// stallingPredecessor accepts connections on path and never answers, until
// the test ends.
func stallingPredecessor(t *testing.T, path string) {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var held []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
}

// TestNewHonoursContext: a predecessor that accepts and then says nothing
// holds New only until New's ctx ends, not for Config.Timeout; the error
// wraps the ctx's.
func TestNewHonoursContext(t *testing.T) {
	netnstest.CheckLeaks(t)
	path := handoffPath(t)
	stallingPredecessor(t, path)
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(300*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			const timeout = time.Minute
			start := time.Now()
			u, err := New(ctx, Config{Path: path, Timeout: timeout})
			took := time.Since(start)
			if u != nil {
				u.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("New = %v after %v, want an error wrapping %v", err, took, tc.want)
			}
			// Far below Timeout: New waited for ctx, not for the protocol's timeout.
			if took > timeout/2 {
				t.Fatalf("New returned after %v, Timeout is %v", took, timeout)
			}
			t.Logf("New returned after %v: %v", took, err)
		})
	}
}

// TestRetryAfterClose: a successor that closes its Upgrader before Ready
// frees the predecessor's handoff slot before Close returns, so that an
// immediate retry is served, not told ErrHandoffInProgress. 50 rounds against
// one predecessor process, which keeps serving throughout.
func TestRetryAfterClose(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		old := startApp(t, path)
		addr := old.expect(t, "ready")[3]
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		for i := range 50 {
			u, err := New(ctx, Config{Path: path})
			if err != nil {
				t.Fatalf("round %d: New: %v", i, err)
			}
			if g := u.Generation(); g != 2 {
				u.Close()
				t.Fatalf("round %d: generation %d, want 2", i, g)
			}
			if err := u.Close(); err != nil {
				t.Fatalf("round %d: Close: %v", i, err)
			}
		}
		if g, err := request(addr); err != nil || g != 1 {
			t.Fatalf("predecessor after 50 aborted handoffs: generation %d, %v", g, err)
		}
	})
}
