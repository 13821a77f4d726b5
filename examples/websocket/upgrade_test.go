package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestUpgradeWebSocket: the built example is upgraded once by SIGHUP while
// 50 gorilla/websocket clients hold connections open to generation 1 (the
// handshake said X-Generation 1, and no other process holds a hijacked
// connection). Each gets the close frame 1001 "going away" before the
// drain's deadline, none ends without it (an EOF, a reset or gorilla's 1006
// would be a cut); new connections are served by generation 2; SIGTERM
// then stops generation 2, whose 5 clients get 1001 too. Every client
// answers the close frame and waits for the server to close the connection,
// which it does: no connection is reset. Every process exits 0, the
// generations' lines count 50 and 5 WebSockets told to go away and none
// forced, and the kernel refused no connection.
func TestUpgradeWebSocket(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		bin := netnstest.Build(t, ".", "websocket")
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		const grace = 10 * time.Second
		// A fixed port is safe: the namespace is the test's own.
		const url = "ws://127.0.0.1:8080/"
		s := netnstest.StartSubreaped(t, bin, nil, "-addr", "127.0.0.1:8080", "-socket", sock,
			"-grace", grace.String(), "-close-in", "2s")
		pids := []int{s.ExpectPID(t, "generation 1 serving 127.0.0.1:8080 ")}
		counters := netnstest.Snapshot(t)

		old := dialClients(t, url, 50, "1")
		sighup := time.Now()
		pids = s.Upgrade(t, pids, "generation 2 serving 127.0.0.1:8080 ", "generation 1 stopped: ")
		checkGoneAway(t, "generation 1", old.wait(), sighup, grace)
		if line, want := s.Expect(t, "generation 1 stopped: "), "generation 1 stopped: release, 50 websockets told to go away, 0 forced, 0 still open"; line != want {
			t.Errorf("%q, want %q", line, want)
		}

		fresh := dialClients(t, url, 5, "2") // served by the new generation
		sigterm := time.Now()
		line := s.StopLast(t, pids, "generation 2 stopped: ")
		checkGoneAway(t, "generation 2", fresh.wait(), sigterm, grace)
		if want := "generation 2 stopped: accept, 5 websockets told to go away, 0 forced, 0 still open"; line != want {
			t.Errorf("%q, want %q", line, want)
		}
		// A connection closed by a reset (or with data unread) would be cut.
		if d := counters.CheckConnects(t); d["Tcp.OutRsts"]+d["Tcp.EstabResets"] != 0 {
			t.Errorf("connections reset: %v, want none", d)
		}
	})
}

// wsEnd is how a client's connection ended.
type wsEnd struct {
	code int    // the close frame's status; 0 without one
	text string // and its text
	err  error  // ReadMessage's error when it was not a close frame
	at   time.Time
	tail error // after the close frame: nil if the server closed the connection
}

// waitEOF reads c until the server closes it (at most 10 s) and returns nil
// then, or the error (a reset, the deadline).
func waitEOF(c net.Conn) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	return err
}

// wsClients is gorilla/websocket clients reading until their connection
// ends.
type wsClients struct {
	wg   sync.WaitGroup
	ends []wsEnd // by client, once wg is done
}

// dialClients opens n WebSockets to url, checks that each handshake names
// generation gen and that each echoes a message, and reads each (for at
// most 30 s) until it ends.
func dialClients(t *testing.T, url string, n int, gen string) *wsClients {
	t.Helper()
	cs := &wsClients{ends: make([]wsEnd, n)}
	for i := range n {
		c, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			cs.wg.Wait()
			t.Fatalf("client %d: %v", i, err)
		}
		if g := resp.Header.Get("X-Generation"); g != gen {
			t.Errorf("client %d connected to generation %q, want %s", i, g, gen)
		}
		msg := fmt.Sprintf("hello %d", i)
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Errorf("client %d: %v", i, err)
		} else if _, got, err := c.ReadMessage(); err != nil || string(got) != msg {
			t.Errorf("client %d echo: %q, %v", i, got, err)
		}
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			for {
				_, _, err := c.ReadMessage()
				if err == nil {
					continue
				}
				e := wsEnd{err: err, at: time.Now()}
				var ce *websocket.CloseError
				if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
					// gorilla has answered the close frame; as RFC 6455
					// section 7.1.1 asks, the server closes the TCP
					// connection first.
					e = wsEnd{code: ce.Code, text: ce.Text, at: e.at}
					e.tail = waitEOF(c.UnderlyingConn())
				}
				cs.ends[i] = e
				return
			}
		}()
	}
	return cs
}

// wait waits for every client's connection to end and returns how.
func (cs *wsClients) wait() []wsEnd {
	cs.wg.Wait()
	return cs.ends
}

// checkGoneAway checks that every one of ends is a close frame 1001 "going
// away" that came less than grace after since, and logs how they ended.
func checkGoneAway(t *testing.T, who string, ends []wsEnd, since time.Time, grace time.Duration) {
	t.Helper()
	how := map[string]int{}
	var last time.Duration
	for i, e := range ends {
		took := e.at.Sub(since)
		last = max(last, took)
		switch {
		case e.err != nil:
			how["cut: "+e.err.Error()]++
		case e.code != websocket.CloseGoingAway || e.text != "going away":
			how[fmt.Sprintf("close %d %q", e.code, e.text)]++
		case e.tail != nil:
			how["close 1001, then "+e.tail.Error()]++
		case took >= grace:
			how["close 1001 after the deadline"]++
			t.Errorf("client %d: close 1001 %v after the stop began, want less than %v", i, took, grace)
		default:
			how["close 1001"]++
		}
	}
	t.Logf("%s's %d clients: %v; the last ended %v after the signal", who, len(ends), how, last.Round(time.Millisecond))
	if how["close 1001"] != len(ends) {
		t.Errorf("%s's clients ended %v, want all %d with close 1001 \"going away\" before the deadline", who, how, len(ends))
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true}, {[]string{"-addr", ":0", "-socket", "/run/x/h.sock", "-grace", "5s", "-close-in", "1s"}, true},
		{[]string{"-close-in", "0s"}, false}, {[]string{"-grace", "1s", "-close-in", "2s"}, false},
		{[]string{"-grace", "soon"}, false}, {[]string{"extra"}, false},
	} {
		if _, err := parseFlags(tc.args, io.Discard); (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}
