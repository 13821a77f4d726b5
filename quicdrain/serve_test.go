package quicdrain_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	quicdrain "github.com/zerodrop/zerodrop/quicdrain"
)

// TestServeAltSvc serves one generation with Serve on 127.0.0.1:0: a
// client over TCP (HTTP/2) finds Alt-Svc naming the port Open bound,
// quic-go's http3 client then reaches the same handler over UDP on that
// port; at the end of ctx both drain and the report says so, and no fd or
// goroutine is left. The TCP server is a copy of srv's configuration: srv's
// ConnState hook sees its connection, and ServeOptions.Drain is called
// with its drain.Server.
func TestServeAltSvc(t *testing.T) {
	netnstest.Run(t, netnstest.Options{}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		cert := netnstest.NewCert(t)
		dir := t.TempDir()
		fwd := filepath.Join(dir, "fwd")
		if err := os.Mkdir(fwd, 0o700); err != nil {
			t.Fatal(err)
		}
		var conns atomic.Int32
		srv := &http.Server{
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}},
			ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			},
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprint(w, r.Proto)
			}),
		}
		addrc := make(chan net.Addr, 1)
		drained := make(chan string, 2)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			rep *quicdrain.ServeReport
			err error
		}
		done := make(chan result, 1)
		go func() {
			rep, err := quicdrain.Serve(ctx, srv, []string{"127.0.0.1:0"}, quicdrain.ServeOptions{
				Config: zerodrop.Config{Handoff: handoff.Config{Path: filepath.Join(dir, "handoff.sock")}, Grace: 10 * time.Second,
					OnServing: func(_ uint64, addrs []net.Addr) { addrc <- addrs[0] }},
				Drain: func(name string, _ *drain.Server) { drained <- name },
				Gen:   quicdrain.Config{Dir: fwd},
			})
			done <- result{rep, err}
		}()
		var addr net.Addr
		select {
		case addr = <-addrc:
		case r := <-done:
			t.Fatalf("Serve: %v", r.err)
		case <-time.After(60 * time.Second):
			t.Fatal("not serving within 60 s")
		}
		if n := len(drained); n != 1 || <-drained != "127.0.0.1:0" {
			t.Errorf("ServeOptions.Drain called %d times, want once, for the TCP listener 127.0.0.1:0", n)
		}
		tcp := &http.Client{Transport: &http.Transport{TLSClientConfig: cert.Client("h2"), ForceAttemptHTTP2: true}, Timeout: 30 * time.Second}
		defer tcp.CloseIdleConnections()
		resp, err := tcp.Get("https://" + addr.String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		alt := resp.Header.Get("Alt-Svc")
		m := regexp.MustCompile(`^h3=":(\d+)"; ma=86400$`).FindStringSubmatch(alt)
		if string(body) != "HTTP/2.0" || m == nil || m[1] != fmt.Sprint(addr.(*net.TCPAddr).Port) {
			t.Fatalf("over TCP: %q, Alt-Svc %q; want HTTP/2.0 and h3 on port %d", body, alt, addr.(*net.TCPAddr).Port)
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("srv.ConnState saw %d new connections, want 1 (the TCP server must carry srv's configuration)", n)
		}
		tr := &http3.Transport{TLSClientConfig: cert.Client(http3.NextProtoH3)}
		defer tr.Close()
		h3 := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		resp, err = h3.Get("https://127.0.0.1:" + m[1] + "/")
		if err != nil {
			t.Fatalf("HTTP/3 on the Alt-Svc port: %v", err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "HTTP/3.0" {
			t.Errorf("over UDP: %q, want HTTP/3.0", body)
		}
		cancel()
		var r result
		select {
		case r = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("Serve did not return within 60 s of ctx's end")
		}
		if r.err != nil || r.rep == nil || len(r.rep.TCP) != 1 || len(r.rep.HTTP3) != 1 {
			t.Fatalf("Serve: %+v, %v", r.rep, r.err)
		}
		if h := r.rep.HTTP3[0]; h.Told != 1 || h.Forced != 0 || h.Stats.Own == 0 {
			t.Errorf("HTTP/3 report %+v: want 1 connection told, none forced", h)
		}
		t.Logf("cause %q; TCP %+v; HTTP/3 %+v", r.rep.Cause, r.rep.TCP[0], r.rep.HTTP3[0])
	})
}

// TestServeRestart restarts a service run by Serve 5 times (SIGHUP: the
// successor takes the TCP listener and the UDP socket through the handoff)
// while 16 HTTP/3 clients POST back to back and 4 open a new connection
// for each POST: no request fails (but see clientRace), every request a
// generation handled reached its client, no connection ends by a stateless
// reset, an idle timeout or a close by the server; every generation hands
// over and forces no connection.
func TestServeRestart(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l, reports := restarts(t, "serve", 5, 16, 4)
		t.Logf("Serve, 5 restarts: %s", l)
		for _, r := range reports {
			t.Log(r)
			if !strings.Contains(r, "handover=ok") || !strings.Contains(r, "forced=0") || !strings.Contains(r, "cause=successor_ready") {
				t.Errorf("report %q: want handover=ok, forced=0, cause successor ready", r)
			}
		}
		w := &l.watch
		if l.failed != 0 || w.resets.Load() != 0 || w.byServer.Load() != 0 || w.idle.Load() != 0 {
			t.Errorf("%s", l)
		}
		l.checkHandled(t, reports)
	})
}
