package handoff

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

func init() { netnstest.RegisterHelper("fdlimit", fdlimitMain) }

// fdlimitMain serves "http" at generation 1 and logs JSON lines to stdout.
// On the line "limit" from stdin it lowers RLIMIT_NOFILE to its lowest free
// fd, so that every new fd (an accepted connection too) fails with EMFILE,
// and on "restore" it restores the limit. It reports on stdout:
//
//	ready <addr>
//	limited <fds>
//	restored
//	exit
//	error <message>
func fdlimitMain() {
	if err := fdlimit(); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
}

func fdlimit() error {
	ctx := context.Background()
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.Lock(os.Stdout), zap.InfoLevel))
	u, err := New(ctx, Config{Path: os.Getenv(envPath), Logger: log})
	if err != nil {
		return err
	}
	defer u.Close()
	ln, err := u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if err := u.Ready(); err != nil {
		return err
	}
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		return err
	}
	fmt.Printf("ready %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- fdlimitCommands(saved) }()
	select {
	case <-u.Exit():
	case err := <-errc:
		return fmt.Errorf("commands ended before exit: %v", err)
	}
	fmt.Println("exit")
	return nil
}

func fdlimitCommands(saved unix.Rlimit) error {
	in := bufio.NewScanner(os.Stdin)
	for i := 0; i < 10 && in.Scan(); i++ {
		switch in.Text() {
		case "limit":
			free := uint64(0) // the lowest fd not open
			for ; free < saved.Cur; free++ {
				if _, err := unix.FcntlInt(uintptr(free), unix.F_GETFD, 0); err == unix.EBADF {
					break
				}
			}
			lim := saved
			lim.Cur = free
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
				return err
			}
			fmt.Printf("limited %d\n", free)
		case "restore":
			if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
				return err
			}
			fmt.Println("restored")
		}
	}
	return in.Err()
}

// One failed accept (EMFILE: the fd table is full) does not end the handoff
// server: it logs handoff.accept_error, backs off and retries, and once fds
// are free again a successor takes the sockets over.
func TestAcceptErrorRetried(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		stdin, cmds, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer cmds.Close()
		p := netnstest.StartHelper(t, "fdlimit", netnstest.HelperOptions{Env: []string{envPath + "=" + path}, Stdin: stdin})
		stdin.Close()
		out := lines(p.Stdout)
		addr := strings.TrimPrefix(nextLine(t, out, "ready "), "ready ")
		fmt.Fprintln(cmds, "limit")
		t.Log(nextLine(t, out, "limited "))
		// A connection the helper cannot accept while its fd table is full:
		// it waits in the handoff socket's backlog.
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		logged, ok := lineWithin(out, `{"level":"warn"`, 15*time.Second)
		c.Close()
		t.Log(logged)
		if !ok || !strings.Contains(logged, `"event":"handoff.accept_error"`) || !strings.Contains(logged, "too many open files") {
			t.Errorf("logged %q, want handoff.accept_error with EMFILE", logged)
		}
		fmt.Fprintln(cmds, "restore")
		nextLine(t, out, "restored")
		ctx := context.Background()
		u, err := New(ctx, Config{Path: path, Timeout: 20 * time.Second})
		if err != nil {
			t.Fatalf("successor after the accept error: %v", err)
		}
		defer u.Close()
		ln := takeHTTP(t, u, addr)
		nextLine(t, out, "exit")
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := p.Wait(wctx); err != nil {
			t.Fatalf("helper: %v", err)
		}
		serveOnce(t, ln, 2)
	})
}

// takeHTTP listens on the inherited "http" of generation 1 at addr and
// calls Ready; the listener is closed when the test ends.
func takeHTTP(t *testing.T, u *Upgrader, addr string) net.Listener {
	t.Helper()
	ln, err := u.Listen(context.Background(), "http", "tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if u.Generation() != 2 {
		t.Fatalf("generation %d, want 2 (inherited)", u.Generation())
	}
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	return ln
}

// nextLine returns the next line that starts with prefix, skipping others
// (at most 100, within 60 s).
func nextLine(t *testing.T, out <-chan string, prefix string) string {
	t.Helper()
	line, ok := lineWithin(out, prefix, 60*time.Second)
	if !ok {
		t.Fatalf("no %q line (last: %q)", prefix, line)
	}
	return line
}

// lineWithin returns the next line that starts with prefix, skipping others
// (at most 100, within d); false if there was none, or the helper reported
// an error (that line is returned).
func lineWithin(out <-chan string, prefix string, d time.Duration) (string, bool) {
	timeout := time.After(d)
	for i := 0; i < 100; i++ {
		select {
		case line, ok := <-out:
			switch {
			case !ok:
				return "(output ended)", false
			case strings.HasPrefix(line, prefix):
				return line, true
			case strings.HasPrefix(line, "error "):
				return line, false
			}
		case <-timeout:
			return "(timeout)", false
		}
	}
	return "(100 other lines)", false
}
