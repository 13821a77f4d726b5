package sockets_test

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/sockets"
)

func TestMain(m *testing.M) {
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// inherit returns a table that inherited one TCP listener named "web" (a
// socket this test created, passed as a dup, as handoff receives it) and
// the listener the test keeps, as the predecessor's.
func inherit(t *testing.T, cfg sockets.Config) (*sockets.Table, *reuseport.Listener) {
	t.Helper()
	pred, err := (&reuseport.Config{}).Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pred.Close() })
	fd, err := linux.DupConn(pred)
	if err != nil {
		t.Fatal(err)
	}
	s := sockets.NewInherited("web", sockets.TCP, "tcp4", pred.Addr().String(), fd, pred.Socket(), 0)
	if err := s.Prepare(&cfg.Listen); err != nil {
		t.Fatal(err)
	}
	tab, err := sockets.New(cfg, []*sockets.Socket{s})
	if err != nil {
		t.Fatal(err)
	}
	return tab, pred
}

// TestOrigins: the inherited socket comes back under its name (a port 0
// matches its port), marked as received from a predecessor; another name
// is created fresh; both are *reuseport.Listener and both are offered, in
// Listen order, with their origin; a name is used once; after Close, Listen
// fails with ErrClosed, and no fd is left open.
func TestOrigins(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		ctx := context.Background()
		tab, pred := inherit(t, sockets.Config{})
		web, err := tab.Listen(ctx, "web", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer web.Close()
		if web.Addr().String() != pred.Addr().String() {
			t.Errorf("inherited listener on %v, want the predecessor's %v", web.Addr(), pred.Addr())
		}
		api, err := tab.Listen(ctx, "api", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		for _, l := range []net.Listener{web, api} {
			if _, ok := l.(*reuseport.Listener); !ok {
				t.Errorf("%T, want *reuseport.Listener", l)
			}
		}
		offer := tab.Offer()
		if len(offer) != 2 || offer[0].Name() != "web" || offer[0].Origin() != sockets.Inherited || offer[1].Name() != "api" || offer[1].Origin() != sockets.Fresh {
			t.Errorf("offer %v, want web (inherited) then api (fresh)", offer)
		}
		if why, err := shared.Lookup(offer[0].FD()); err != nil || why != shared.Predecessor {
			t.Errorf("mark of the inherited socket %q, %v; want %q", why, err, shared.Predecessor)
		}
		if why, _ := shared.Lookup(offer[1].FD()); why != "" {
			t.Errorf("mark of a fresh socket %q, want none", why)
		}
		if _, err := tab.Listen(ctx, "api", "tcp4", "127.0.0.1:0"); err == nil {
			t.Error("a name used twice was accepted")
		}
		if err := tab.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := tab.Listen(ctx, "late", "tcp4", "127.0.0.1:0"); !errors.Is(err, sockets.ErrClosed) {
			t.Errorf("Listen after Close: %v, want ErrClosed", err)
		}
	})
}

// TestMismatchedOptions: an inherited socket whose options differ from
// Config.Listen fails Listen with reuseport.ErrOptionMismatch (its fds
// closed), or, with WarnOnMismatch, is returned.
func TestMismatchedOptions(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		for _, warn := range []bool{false, true} {
			cfg := sockets.Config{WarnOnMismatch: warn}
			cfg.Listen.Options.FastOpen = 16
			tab, _ := inherit(t, cfg)
			l, err := tab.Listen(context.Background(), "web", "tcp4", "127.0.0.1:0")
			switch {
			case warn && err != nil:
				t.Errorf("WarnOnMismatch: %v", err)
			case !warn && !errors.Is(err, reuseport.ErrOptionMismatch):
				t.Errorf("Listen: %v, want ErrOptionMismatch", err)
			}
			if l != nil {
				l.Close()
			}
			tab.Close()
		}
	})
}

// TestUnclaimedClosed: an inherited socket no Listen claims is listed by
// Unclaimed and closed by CloseUnclaimed; a later Listen of its name
// creates a fresh socket.
func TestUnclaimedClosed(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		tab, _ := inherit(t, sockets.Config{})
		defer tab.Close()
		if got := tab.Unclaimed(); len(got) != 1 || got[0] != "web" {
			t.Errorf("Unclaimed %v, want [web]", got)
		}
		if n := tab.CloseUnclaimed(); n != 1 {
			t.Errorf("CloseUnclaimed closed %d, want 1", n)
		}
		l, err := tab.Listen(context.Background(), "web", "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if o := tab.Offer(); len(o) != 1 || o[0].Origin() != sockets.Fresh {
			t.Errorf("offer %v, want one fresh socket", o)
		}
	})
}
