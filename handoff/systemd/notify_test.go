package systemd

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

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

func monotonic(t *testing.T) int64 {
	us, err := monotonicUsec()
	if err != nil {
		t.Fatal(err)
	}
	return us
}

func TestNotifyProtocol(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		for _, addr := range []string{filepath.Join(t.TempDir(), "notify"), "@zerodrop-notify-" + strconv.Itoa(os.Getpid())} {
			// A Notifier for $NOTIFY_SOCKET sends its states through
			// go-systemd's daemon.SdNotify, one for another socket through
			// our sendmsg; Store always through ours.
			for _, env := range []bool{false, true} {
				name := map[bool]string{true: "abstract", false: "path"}[addr[0] == '@'] + map[bool]string{true: " in NOTIFY_SOCKET", false: ""}[env]
				t.Run(name, func(t *testing.T) {
					sd := netnstest.ListenNotify(t, addr+map[bool]string{true: "-env", false: ""}[env])
					t.Setenv(EnvNotifySocket, map[bool]string{true: sd.Addr, false: ""}[env])
					testPhases(t, sd)
				})
			}
		}
	})
}

func testPhases(t *testing.T, sd *netnstest.NotifySocket) {
	n := &Notifier{Socket: sd.Addr}
	l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if err := n.Store("http", l); err != nil {
		t.Fatal(err)
	}
	msg, files := sd.Recv(t)
	if msg != "FDSTORE=1\nFDNAME=http" || len(files) != 1 {
		t.Fatalf("store: %q with %d fds, want FDSTORE=1\\nFDNAME=http and 1", msg, len(files))
	}
	if got, want := inodeOf(files[0]), inodeOf(l); got != want || want == 0 {
		t.Fatalf("stored fd has inode %d, listener %d", got, want)
	}
	if acc, err := unix.GetsockoptInt(int(files[0].Fd()), unix.SOL_SOCKET, unix.SO_ACCEPTCONN); err != nil || acc != 1 {
		t.Fatalf("stored fd: SO_ACCEPTCONN %d, %v; want a listening socket", acc, err)
	}

	must(t, n.Ready("generation 1 serving 127.0.0.1"))
	sd.Expect(t, "READY=1\nSTATUS=generation 1 serving 127.0.0.1")

	before := monotonic(t)
	must(t, n.Reloading("generation 2 starting"))
	after := monotonic(t)
	msg, _ = sd.Recv(t)
	var us int64
	if _, err := fmt.Sscanf(msg, "RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=generation 2 starting", &us); err != nil ||
		msg != fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=generation 2 starting", us) {
		t.Fatalf("reloading: %q (%v)", msg, err)
	}
	if us < before || us > after {
		t.Fatalf("MONOTONIC_USEC=%d, want within [%d, %d]", us, before, after)
	}

	must(t, n.MainPID(4242))
	sd.Expect(t, "MAINPID=4242")
	must(t, n.Ready("generation 2 serving"))
	sd.Expect(t, "READY=1\nSTATUS=generation 2 serving")
	must(t, n.Stopping("generation 2 draining"))
	sd.Expect(t, "STOPPING=1\nSTATUS=generation 2 draining")
	must(t, n.Status("drained"))
	sd.Expect(t, "STATUS=drained")
	must(t, n.Ready(""))
	sd.Expect(t, "READY=1")
	must(t, n.Remove("http"))
	sd.Expect(t, "FDSTOREREMOVE=1\nFDNAME=http")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestNotifyErrors(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		var none *Notifier
		if err := none.Ready("x"); err != nil {
			t.Fatalf("nil notifier Ready: %v, want nil", err)
		}
		missing := &Notifier{Socket: filepath.Join(t.TempDir(), "absent")}
		t.Setenv(EnvNotifySocket, filepath.Join(t.TempDir(), "absent-too"))
		missingEnv := FromEnv() // daemon.SdNotify's way
		cases := []struct {
			name string
			err  error
			is   []error
		}{
			{"store without systemd", none.Store("http", l), []error{ErrNotify, ErrNoNotifySocket}},
			{"remove without systemd", none.Remove("http"), []error{ErrNotify, ErrNoNotifySocket}},
			{"socket absent", missing.Ready("x"), []error{ErrNotify, syscall.ENOENT}},
			{"socket in NOTIFY_SOCKET absent", missingEnv.Ready("x"), []error{ErrNotify, syscall.ENOENT}},
			{"remove to absent socket in NOTIFY_SOCKET", missingEnv.Remove("http"), []error{ErrNotify, syscall.ENOENT}},
			{"store to absent socket in NOTIFY_SOCKET", missingEnv.Store("http", l), []error{ErrNotify, syscall.ENOENT}},
			{"store to absent socket", missing.Store("http", l), []error{ErrNotify, syscall.ENOENT}},
			{"name with colon", missing.Store("a:b", l), []error{ErrNotify}},
			{"empty name", missing.Remove(""), []error{ErrNotify}},
			{"newline in status", missing.Status("a\nREADY=1"), []error{ErrNotify}},
			{"relative socket", (&Notifier{Socket: "notify"}).Ready("x"), []error{ErrNotify}},
		}
		for _, c := range cases {
			var ne *NotifyError
			if !errors.As(c.err, &ne) {
				t.Errorf("%s: %v, want a *NotifyError", c.name, c.err)
				continue
			}
			for _, is := range c.is {
				if !errors.Is(c.err, is) {
					t.Errorf("%s: %v, want errors.Is %v", c.name, c.err, is)
				}
			}
		}
	})
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvNotifySocket, "")
	if n := FromEnv(); n != nil {
		t.Fatalf("FromEnv with NOTIFY_SOCKET unset: %+v, want nil", n)
	}
	t.Setenv(EnvNotifySocket, "@sd")
	if n := FromEnv(); n == nil || n.Socket != "@sd" {
		t.Fatalf("FromEnv: %+v, want @sd", n)
	}
}

func TestWatchdog(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		sd := netnstest.ListenNotify(t, filepath.Join(t.TempDir(), "notify"))
		n := &Notifier{Socket: sd.Addr}
		ctx := context.Background()

		t.Setenv("WATCHDOG_USEC", "")
		if w, err := n.StartWatchdog(ctx); w != nil || err != nil {
			t.Fatalf("without WATCHDOG_USEC: %v, %v; want nil, nil", w, err)
		}
		t.Setenv("WATCHDOG_USEC", "200000")
		t.Setenv("WATCHDOG_PID", "1")
		if w, err := n.StartWatchdog(ctx); w != nil || err != nil {
			t.Fatalf("WATCHDOG_PID of another process: %v, %v; want nil, nil", w, err)
		}
		t.Setenv("WATCHDOG_USEC", "soon")
		if _, err := n.StartWatchdog(ctx); !errors.Is(err, ErrNotify) {
			t.Fatalf("malformed WATCHDOG_USEC: %v, want ErrNotify", err)
		}
		t.Setenv("WATCHDOG_USEC", "200000")
		t.Setenv("WATCHDOG_PID", "me")
		if _, err := n.StartWatchdog(ctx); !errors.Is(err, ErrNotify) || !strings.Contains(err.Error(), "WATCHDOG_PID=me") {
			t.Fatalf("malformed WATCHDOG_PID: %v, want ErrNotify naming it", err)
		}

		t.Setenv("WATCHDOG_USEC", "200000")
		t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
		w, err := n.StartWatchdog(ctx)
		if err != nil || w == nil || w.Interval != 200*time.Millisecond {
			t.Fatalf("StartWatchdog: %+v, %v; want interval 200ms", w, err)
		}
		defer w.Stop()
		for range 3 {
			sd.Expect(t, "WATCHDOG=1")
		}
		w.Stop()
		w.Stop()
		if err := w.Err(); err != nil || w.Pings() < 3 {
			t.Fatalf("after stop: %d pings, %v", w.Pings(), err)
		}

		// A failing ping is recorded (and logged), and pings go on.
		bad := &Notifier{Socket: filepath.Join(t.TempDir(), "absent")}
		ctx, cancel := context.WithCancel(ctx)
		w = bad.Pinger(ctx, 10*time.Millisecond)
		deadline := time.Now().Add(10 * time.Second)
		for w.Pings() < 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		w.Stop()
		if w.Pings() < 2 || !errors.Is(w.Err(), syscall.ENOENT) {
			t.Fatalf("failing pinger: %d pings, err %v; want >= 2 and ENOENT", w.Pings(), w.Err())
		}
	})
}
