package drain_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// checkOnce fails unless err is one *net.OpError for op on addr ("" for
// none) matching target, whose cause is no *net.OpError, and whose text is
// want: wrapped once, in the shape of the standard library's errors.
func checkOnce(t *testing.T, what string, err error, op, addr string, target error, want string) {
	t.Helper()
	var oe *net.OpError
	switch {
	case !errors.As(err, &oe) || error(oe) != err:
		t.Errorf("%s: %#v, want a *net.OpError", what, err)
	case oe.Op != op || oe.Net != "tcp" || (addr == "") != (oe.Addr == nil) || (oe.Addr != nil && oe.Addr.String() != addr):
		t.Errorf("%s: %#v, want op %s, net tcp, addr %q", what, oe, op, addr)
	case errors.As(oe.Err, new(*net.OpError)):
		t.Errorf("%s: %q wraps a second *net.OpError", what, err)
	case !errors.Is(err, target):
		t.Errorf("%s: %q does not match %q", what, err, target)
	case err.Error() != want || strings.Count(err.Error(), op+" tcp") != 1:
		t.Errorf("%s: %q, want %q", what, err, want)
	}
}

// TestErrorsWrappedOnce: the errors the package returns itself (not those
// of the listener or net/http) are each one *net.OpError, with the op and
// address, wrapping the sentinel callers test with errors.Is.
func TestErrorsWrappedOnce(t *testing.T) {
	_, err := drain.Wrap(nil, drain.Options{})
	checkOnce(t, "Wrap(nil)", err, "wrap", "", drain.ErrNilListener, "wrap tcp: nil listener")
	err = (&drain.Server{HTTP: &http.Server{}}).Serve(nil)
	checkOnce(t, "Serve(nil)", err, "serve", "", drain.ErrNilListener, "serve tcp: nil listener")
	_, err = (&drain.Server{}).Shutdown(context.Background())
	checkOnce(t, "Shutdown without HTTP", err, "shutdown", "", drain.ErrNoHTTPServer, "shutdown tcp: drain.Server has no HTTP server")
	err = (&drain.Server{HTTP: &http.Server{}}).ServeConn(nil, nil)
	checkOnce(t, "ServeConn(nil)", err, "serve", "", err, "serve tcp: nil connection")

	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		tl := listenTCP(t, "127.0.0.1:0")
		addr := tl.Addr().String()
		err := (&drain.Server{}).Serve(tl)
		checkOnce(t, "Serve without HTTP", err, "serve", addr, drain.ErrNoHTTPServer, "serve tcp "+addr+": drain.Server has no HTTP server")

		tl = listenTCP(t, "127.0.0.1:0")
		defer tl.Close()
		addr = tl.Addr().String()
		client, err := net.Dial("tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		c, err := tl.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		err = (&drain.Server{}).ServeConn(c, nil)
		checkOnce(t, "ServeConn without HTTP", err, "serve", addr, drain.ErrNoHTTPServer, "serve tcp "+addr+": drain.Server has no HTTP server")

		dl, err := drain.Wrap(listenTCP(t, "127.0.0.1:0"), drain.Options{})
		if err != nil {
			t.Fatal(err)
		}
		daddr := dl.Addr().String()
		if err := dl.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = dl.Accept()
		checkOnce(t, "Accept after Close", err, "accept", daddr, net.ErrClosed, "accept tcp "+daddr+": "+net.ErrClosed.Error())
	})
}
