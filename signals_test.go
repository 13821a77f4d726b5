package zerodrop_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// signalsMain opens a Generation with a handoff socket (ZD_SOCK) and no
// Successor, NoSignals when ZD_NOSIGNALS is set, prints "open <pid>" and
// waits in Wait for at most a minute.
func signalsMain() {
	if err := defaultAction(syscall.SIGHUP); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	cfg := zerodrop.Config{Handoff: handoff.Config{Path: os.Getenv("ZD_SOCK")}, NoSignals: os.Getenv("ZD_NOSIGNALS") != ""}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := zerodrop.Open(ctx, []string{"127.0.0.1:0"}, cfg)
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	defer g.Close()
	fmt.Printf("open %d\n", os.Getpid())
	cause, _, _ := g.Wait(ctx, nil)
	fmt.Printf("stopped %s\n", cause)
}

// defaultAction gives sig its default action back when this process was
// started with it ignored (nohup ignores SIGHUP, an ignored signal stays
// ignored across exec, and Go keeps an inherited SIG_IGN of SIGHUP and
// SIGINT): TestSignalsAsked is about the handlers Open installs, not about
// how the suite was started. The kernel's struct sigaction all zero is
// SIG_DFL, no flags, an empty mask.
func defaultAction(sig syscall.Signal) error {
	if !signal.Ignored(sig) {
		return nil
	}
	var act [4]uint64 // handler, flags, restorer, mask
	if _, _, errno := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0); errno != 0 {
		return fmt.Errorf("rt_sigaction %v: %w", sig, errno)
	}
	return nil
}

// TestSignalsAsked: the handlers Open installs are the ones asked for.
// Without a Successor, SIGHUP is not an upgrade signal: it has its default
// action (the process ends), and nothing is started. With NoSignals, SIGTERM
// is not a stop signal either. With the defaults, SIGTERM stops the
// generation through Wait. Before, Open always installed SIGTERM, SIGINT
// and, with a handoff socket, SIGHUP, which started this executable again.
// (Run under nohup, the first case failed until the helper undid the
// inherited SIG_IGN: the process ignored SIGHUP whatever Open did.)
func TestSignalsAsked(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		for _, tc := range []struct {
			name      string
			noSignals bool
			sig       syscall.Signal
			handled   bool
		}{
			{"hup without successor", false, syscall.SIGHUP, false},
			{"term with NoSignals", true, syscall.SIGTERM, false},
			{"term by default", false, syscall.SIGTERM, true},
		} {
			env := []string{"ZERODROP_TEST_HELPER=signals", "ZD_SOCK=" + filepath.Join(t.TempDir(), "h.sock")}
			if tc.noSignals {
				env = append(env, "ZD_NOSIGNALS=1")
			}
			s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
			pid := servingPIDField(t, s.Expect(t, "open "), 1)
			if err := syscall.Kill(pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			if tc.handled {
				s.Expect(t, "stopped "+tc.sig.String())
			}
			ws := s.Reap(t, pid, 30*time.Second)
			if got := ws.Signaled() && ws.Signal() == tc.sig; got == tc.handled {
				t.Errorf("%s: the process ended with %v; want it killed by the signal: %t", tc.name, ws, !tc.handled)
			}
		}
	})
}

// TestUpgradeWithoutSignals: with NoSignals, Generation.Upgrade starts the
// Successor (once per call), and ctx stops the generation. Without a
// Successor, Upgrade has nothing to start.
func TestUpgradeWithoutSignals(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		var started atomic.Int32
		cfg := zerodrop.Config{Handoff: handoff.Config{Path: filepath.Join(t.TempDir(), "h.sock")}, NoSignals: true,
			Successor: func() *exec.Cmd { started.Add(1); return exec.Command("true") }}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		g, err := zerodrop.Open(ctx, []string{"127.0.0.1:0"}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		defer g.Listeners()[0].Close()
		if !g.Upgrade() {
			t.Fatal("Upgrade refused with a Successor")
		}
		done := make(chan string, 1)
		go func() {
			cause, _, _ := g.Wait(ctx, nil)
			done <- cause
		}()
		for i := 0; started.Load() == 0 && i < 3000; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if n := started.Load(); n != 1 {
			t.Errorf("Successor called %d times, want 1", n)
		}
		cancel()
		if cause := <-done; cause != context.Canceled.Error() {
			t.Errorf("Wait: %q, want %q", cause, context.Canceled.Error())
		}
		g2, err := zerodrop.Open(context.Background(), []string{"127.0.0.1:0"}, zerodrop.Config{NoSignals: true})
		if err != nil {
			t.Fatal(err)
		}
		defer g2.Close()
		defer g2.Listeners()[0].Close()
		if g2.Upgrade() {
			t.Error("Upgrade accepted without a Successor")
		}
	})
}

// servingPIDField parses the pid in field i of line.
func servingPIDField(t *testing.T, line string, i int) int {
	t.Helper()
	var pid int
	var word string
	if _, err := fmt.Sscan(line, &word, &pid); err != nil || i != 1 {
		t.Fatalf("%q: %v", line, err)
	}
	return pid
}
