package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

func TestMain(m *testing.M) {
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// TestGoingAway: 50 WebSocket clients (gorilla/websocket's Dialer) hold
// connections open across a drain. With drain.GoingAway as the Hijacked
// callback every one gets the close frame 1001 before the deadline and none
// is cut without it; without a callback (the subtest "none") none hears
// anything: net/http's Shutdown does not wait for hijacked connections, so
// the drain ends and leaves them to their handlers, still open.
func TestGoingAway(t *testing.T) {
	for _, withCallback := range []bool{true, false} {
		t.Run(map[bool]string{true: "GoingAway", false: "none"}[withCallback], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				goingAway(t, withCallback)
			})
		})
	}
}

func goingAway(t *testing.T, withCallback bool) {
	const n = 50
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	srv := &drain.Server{HTTP: newHTTPServer(&echo{})}
	if withCallback {
		srv.Hijacked = drain.GoingAway(2 * time.Second)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		c, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "hello" {
			t.Fatalf("echo: %q, %v", msg, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(8 * time.Second)) // the drain's deadline and then some
			for {
				_, _, err := c.ReadMessage()
				var ce *websocket.CloseError
				if errors.As(err, &ce) {
					codes[i] = ce.Code
					return
				}
				if err != nil {
					codes[i] = -1
					return
				}
			}
		}()
	}
	deadline := 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	rep, err := srv.Shutdown(ctx)
	took := time.Since(start)
	wg.Wait()
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
	byCode := map[int]int{}
	for _, c := range codes {
		byCode[c]++
	}
	t.Logf("close codes %v; report: hijacked notified %d, forced %d; Shutdown took %v (err %v)",
		byCode, rep.HTTP.HijackedNotified, len(rep.HTTP.Forced), took.Round(time.Millisecond), err)
	if withCallback {
		if byCode[websocket.CloseGoingAway] != n || rep.HTTP.HijackedNotified != n || len(rep.HTTP.Forced) != 0 || err != nil {
			t.Errorf("want %d closes 1001, %d notified, none forced, no error", n, n)
		}
		return
	}
	if byCode[-1] != n || rep.HTTP.HijackedNotified != 0 {
		t.Errorf("without a callback: want %d left without a close frame, 0 notified", n)
	}
}
