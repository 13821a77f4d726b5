package zerodrop_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/reuseport"
)

// tableMain opens a Generation on ZD_ADDR as a socket-activated service
// (LISTEN_PID set here, as systemd sets it between fork and exec), through
// handoff when ZD_SOCK is set, and with Config.Handoff.Listen asking for
// TCP_DEFER_ACCEPT when ZD_MISMATCH is set (systemd's socket has none). It
// prints "table <type of the listener> <errors.Is(err,
// reuseport.ErrOptionMismatch)> <the ownership mark of its socket>".
func tableMain() {
	os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	cfg := zerodrop.Config{Handoff: handoff.Config{Path: os.Getenv("ZD_SOCK")}, NoSignals: true}
	if os.Getenv("ZD_MISMATCH") != "" {
		cfg.Handoff.Listen.Options.DeferAccept = time.Second
	}
	g, err := zerodrop.Open(context.Background(), []string{os.Getenv("ZD_ADDR")}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		fmt.Printf("table - %t -\n", errors.Is(err, reuseport.ErrOptionMismatch))
		return
	}
	defer g.Close()
	l := g.Listeners()[0]
	defer l.Close()
	mark := "-"
	linux.Control(l.(syscall.Conn), func(fd int) error {
		if m, err := shared.Lookup(fd); err == nil && m != "" {
			mark = strings.ReplaceAll(m, " ", "_")
		}
		return nil
	})
	fmt.Printf("table %T false %s\n", l, mark)
}

// TestActivatedSocketOnePath: one systemd-activated socket opened by
// zerodrop.Open with and without handoff gets the same checks (options that
// differ from Config.Handoff.Listen fail with reuseport.ErrOptionMismatch), the
// same type (*reuseport.Listener) and the same ownership mark (held by
// systemd, so that a drain never shuts it down). Before the socket table,
// the path without handoff returned a *net.TCPListener and did not mark the
// socket, and the path through handoff did not check its options.
func TestActivatedSocketOnePath(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		const addr = "127.0.0.1:8080"
		ln, err := (&reuseport.Config{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fd3, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		defer fd3.Close()
		bin := netnstest.ExecutableCopy(t)
		open := func(handoff string, mismatch bool) string {
			env := []string{"ZERODROP_TEST_HELPER=table", "ZD_ADDR=" + addr, "LISTEN_FDS=1", "LISTEN_FDNAMES=http"}
			if handoff != "" {
				env = append(env, "ZD_SOCK="+handoff)
			}
			if mismatch {
				env = append(env, "ZD_MISMATCH=1")
			}
			s := netnstest.StartSubreapedFiles(t, bin, []*os.File{fd3}, env, "-test.run=^$")
			line := s.Expect(t, "table ")
			if ws := s.Reap(t, s.Cmd.Process.Pid, 30*time.Second); ws.ExitStatus() != 0 {
				t.Errorf("helper exited with %v", ws)
			}
			return line
		}
		want := map[bool]string{
			false: "table *reuseport.Listener false " + strings.ReplaceAll(shared.Systemd, " ", "_"),
			true:  "table - true -",
		}
		for _, mismatch := range []bool{false, true} {
			plain := open("", mismatch)
			handed := open(filepath.Join(t.TempDir(), "handoff.sock"), mismatch)
			if plain != want[mismatch] || handed != want[mismatch] {
				t.Errorf("options differ %t: without handoff %q, through handoff %q; want both %q", mismatch, plain, handed, want[mismatch])
			}
		}
	})
}
