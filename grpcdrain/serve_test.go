package grpcdrain_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestServeBadInput: what Serve still checks at run time are values (the
// HTTP-only fields of zerodrop.Options are not in zerodrop.Config, the
// type it takes): each mistake is a typed error, and nothing is left open.
func TestServeBadInput(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		if _, err := grpcdrain.Serve(ctx, nil, []string{"127.0.0.1:0"}, zerodrop.Config{}); !errors.Is(err, grpcdrain.ErrNoServer) {
			t.Errorf("nil server: %v, want ErrNoServer", err)
		}
		s := grpcdrain.New(grpcdrain.Config{})
		defer s.GRPC().Stop()
		if _, err := grpcdrain.Serve(ctx, s, nil, zerodrop.Config{}); !errors.Is(err, zerodrop.ErrNoAddress) {
			t.Errorf("no address: %v, want zerodrop.ErrNoAddress", err)
		}
		// The second address is taken: the first listener must be closed.
		taken, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		var oe *net.OpError
		if _, err := grpcdrain.Serve(ctx, s, []string{"127.0.0.1:0", taken.Addr().String()}, zerodrop.Config{NoSignals: true}); !errors.As(err, &oe) || !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("address in use: %v, want a *net.OpError wrapping EADDRINUSE", err)
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		var ip *handoff.InsecurePathError
		if _, err := grpcdrain.Serve(ctx, s, []string{"127.0.0.1:0"}, zerodrop.Config{NoSignals: true, Handoff: handoff.Config{Path: filepath.Join(dir, "h.sock")}}); !errors.As(err, &ip) {
			t.Errorf("handoff socket in a world-writable directory: %v, want *handoff.InsecurePathError", err)
		}
	})
}
