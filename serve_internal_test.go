package zerodrop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
)

// A plain server (no TLSConfig) whose drain.Server is handed a connection
// (ServeConn, as passConns does with a predecessor's idle connections)
// just after serve started it. The Serve under ServeConn sets net/http's
// HTTP/2 up, which gives a server without a TLSConfig an empty one; serve
// must have chosen plain HTTP or TLS before. It chose in its goroutine,
// later: beside a CPU hog TestServeUpgrade's successor went to ServeTLS
// with no certificate and never answered, and the race detector reported
// the read against http2ConfigureServer's write. This test fails so under
// the race detector before the choice was made before the goroutine.
func TestServeChoosesTLSFirst(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		var lc net.ListenConfig
		lc.SetMultipathTCP(false) // the drain refuses MPTCP listeners
		ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		other, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		client, err := net.Dial("tcp4", other.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		c, err := other.(*net.TCPListener).AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		// One P: the goroutine serve starts waits while ServeConn's Serve,
		// started after it, runs first (the handoff as it came beside the
		// hog); whatever the order, serve's choice must not depend on it.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		g := &generationSet{Generation: &Generation{lns: []net.Listener{ln}, names: []string{ln.Addr().String()}}}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
		servers, res := g.serve(srv, Options{}, zap.NewNop())

		if err := servers[0].ServeConn(c, nil); err != nil {
			t.Fatal(err)
		}

		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String())
		if err != nil {
			select {
			case serr := <-res.first:
				err = fmt.Errorf("%w (serve: %v)", err, serr)
			default:
			}
			t.Fatalf("the listener, served plain: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Errorf("the listener answered %q", b)
		}
		client.Close()
		tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := servers[0].Shutdown(ctx); err != nil {
			t.Error(err)
		}
		res.wg.Wait()
		select {
		case err := <-res.first:
			if !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serve: %v", err)
			}
		default:
		}
	})
}
