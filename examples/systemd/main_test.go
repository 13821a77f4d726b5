package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"golang.org/x/sys/unix"
)

const envArgs = "ZD_ARGS" // the server helper's command line

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("server", func() {
		c, err := parse(strings.Fields(os.Getenv(envArgs)))
		if err != nil {
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
		defer stop()
		if err := run(ctx, c, nil, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			os.Exit(1)
		}
	})
	// listen-pid-exec sets LISTEN_PID to its own pid and execs the server, as
	// systemd does between fork and exec.
	netnstest.RegisterHelper("listen-pid-exec", func() {
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "LISTEN_PID=") && !strings.HasPrefix(kv, "ZERODROP_TEST_HELPER=") {
				env = append(env, kv)
			}
		}
		env = append(env, "LISTEN_PID="+strconv.Itoa(os.Getpid()), "ZERODROP_TEST_HELPER=server")
		exe, err := os.Executable()
		if err == nil {
			err = syscall.Exec(exe, os.Args, env)
		}
		fmt.Fprintln(os.Stderr, "listen-pid-exec:", err)
		os.Exit(2)
	})
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// get fetches http://addr/ and returns the body's first line.
func get(t *testing.T, addr string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %q %v", addr, resp.StatusCode, b, err)
	}
	return strings.TrimSpace(string(b))
}

// lineReader reads a helper's stdout with a bound per line.
type lineReader struct {
	p *netnstest.Proc
	r *bufio.Reader
}

func (l *lineReader) next(t *testing.T) string {
	t.Helper()
	l.p.Stdout.SetReadDeadline(time.Now().Add(20 * time.Second))
	s, err := l.r.ReadString('\n')
	if err != nil {
		t.Fatalf("server output %q: %v", s, err)
	}
	return strings.TrimSuffix(s, "\n")
}

func stdout(p *netnstest.Proc) *lineReader { return &lineReader{p: p, r: bufio.NewReader(p.Stdout)} }

func stopAndWait(t *testing.T, p *netnstest.Proc) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("server exit: %v", err)
	}
}

// onlyListener returns the one listener on port, waiting for it (bounded).
func onlyListener(t *testing.T, port int) sockdiag.Listener {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ls, err := sockdiag.Listeners(uint16(port))
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 {
			return ls[0]
		}
		if len(ls) > 1 || time.Now().After(deadline) {
			t.Fatalf("listeners on %d: %+v, want one", port, ls)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestSocketActivated runs the example under Debian's systemd-socket-activate
// with --fdname=http: it serves from the socket the activator bound.
func TestSocketActivated(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin, err := exec.LookPath("systemd-socket-activate")
		if err != nil {
			t.Fatalf("this test needs systemd-socket-activate (apt-get install systemd; .ci/run does): %v", err)
		}
		port := freePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		p := netnstest.StartHelper(t, "server", netnstest.HelperOptions{Setup: func(cmd *exec.Cmd) {
			cmd.Path = bin
			cmd.Args = []string{bin, "--listen=" + addr, "--fdname=http", "-E", "ZERODROP_TEST_HELPER=server",
				"-E", envArgs + "=-name http -generation 7 -ignore-options SO_REUSEPORT", os.Args[0], "-test.run=^$"}
		}})
		bound := onlyListener(t, port)
		pid := p.Cmd.Process.Pid
		want := fmt.Sprintf("generation 7 pid %d inode %d", pid, bound.Inode)
		if got := get(t, addr); got != want {
			t.Fatalf("GET / = %q, want %q (the activator bound inode %d)", got, want, bound.Inode)
		}
		if body := metrics(t, addr); !strings.Contains(body, "\nzerodrop_generation 7\n") {
			t.Errorf("/metrics has no line \"zerodrop_generation 7\" (-generation 7):\n%s", body)
		}
		out := stdout(p)
		if got, want := out.next(t), fmt.Sprintf("generation 7 serving %s (from systemd, inode %d)", addr, bound.Inode); got != want {
			t.Fatalf("server said %q, want %q", got, want)
		}
		stopAndWait(t, p)
		if got := out.next(t); got != "stopped: accept" {
			t.Fatalf("server said %q at stop", got)
		}
	})
}

// TestOptionMismatchRefused: the same launch without -ignore-options fails,
// naming SO_REUSEPORT (systemd-socket-activate does not set it).
func TestOptionMismatchRefused(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin, err := exec.LookPath("systemd-socket-activate")
		if err != nil {
			t.Fatalf("this test needs systemd-socket-activate: %v", err)
		}
		port := freePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		var stderr strings.Builder
		p := netnstest.StartHelper(t, "server", netnstest.HelperOptions{Setup: func(cmd *exec.Cmd) {
			cmd.Path = bin
			cmd.Args = []string{bin, "--listen=" + addr, "--fdname=http", "-E", "ZERODROP_TEST_HELPER=server",
				"-E", envArgs + "=-name http", os.Args[0], "-test.run=^$"}
			cmd.Stderr = &stderr
		}})
		onlyListener(t, port)
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		err = p.Wait(ctx)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "SO_REUSEPORT want 1 got 0") {
			t.Fatalf("server exit %v, stderr %q; want exit 1 naming SO_REUSEPORT", err, stderr.String())
		}
	})
}

// TestRestartThroughFDStore plays systemd for the example run with -store and
// no socket unit: generation 1 listens itself and stores the socket; it stops
// (SIGTERM: STOPPING=1, drain) and exits; 20 clients queue while no process
// runs; generation 2 gets the stored fd the way systemd passes it and answers
// all 20 from the same socket.
func TestRestartThroughFDStore(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		sd := netnstest.ListenNotify(t, filepath.Join(t.TempDir(), "notify"))
		port := freePort(t)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		notify := "NOTIFY_SOCKET=" + sd.Addr
		a := netnstest.StartHelper(t, "server", netnstest.HelperOptions{Env: []string{notify, envArgs + "=-store -addr " + addr}})
		msg, stored := sd.Recv(t)
		if msg != "FDSTORE=1\nFDNAME=http" || len(stored) != 1 {
			t.Fatalf("generation 1 sent %q with %d fds", msg, len(stored))
		}
		l := onlyListener(t, port)
		if ino := inodeOf(t, stored[0]); ino != l.Inode {
			t.Fatalf("stored inode %d, listener %d", ino, l.Inode)
		}
		status := fmt.Sprintf("generation 1 serving %s (listened, inode %d)", addr, l.Inode)
		sd.Expect(t, "READY=1\nSTATUS="+status)
		if got, want := get(t, addr), fmt.Sprintf("generation 1 pid %d inode %d", a.Cmd.Process.Pid, l.Inode); got != want {
			t.Fatalf("GET / = %q, want %q", got, want)
		}
		aOut := stdout(a)
		aOut.next(t) // the status line
		counters := netnstest.Snapshot(t)
		stopAndWait(t, a)
		sd.Expect(t, "STOPPING=1\nSTATUS=generation 1 draining")
		if got := aOut.next(t); got != "stopped: release" {
			t.Fatalf("generation 1 said %q, want a release (the fd store holds the socket)", got)
		}

		clients := netnstest.Queue(t, addr, 20, netnstest.ClientOptions{Payload: func(int) []byte {
			return []byte("GET / HTTP/1.1\r\nHost: example\r\nConnection: close\r\n\r\n")
		}})
		if q := onlyListener(t, port); q.Inode != l.Inode || q.Queue != 20 {
			t.Fatalf("with no server: inode %d queue %d, want inode %d queue 20", q.Inode, q.Queue, l.Inode)
		}
		b := netnstest.StartHelper(t, "listen-pid-exec", netnstest.HelperOptions{
			ExtraFiles: stored,
			Env:        []string{notify, "LISTEN_FDS=1", "LISTEN_FDNAMES=http", envArgs + "=-store -generation 2"},
		})
		sd.Recv(t) // generation 2 stores the socket again (systemd keeps one copy)
		sd.Expect(t, fmt.Sprintf("READY=1\nSTATUS=generation 2 serving %s (from systemd, inode %d)", addr, l.Inode))
		tally := clients.Await(20 * time.Second)
		want := fmt.Sprintf("generation 2 pid %d inode %d\n", b.Cmd.Process.Pid, l.Inode)
		for i, c := range clients.List {
			if c.Outcome != netnstest.Answered || !strings.HasPrefix(string(c.Reply), "HTTP/1.1 200 OK") || !strings.HasSuffix(string(c.Reply), want) {
				t.Errorf("client %d: %v %q (%v), want 200 ending %q", i, c.Outcome, c.Reply, c.Err, want)
			}
		}
		if tally[netnstest.Answered] != 20 {
			t.Fatalf("tally %v, want 20 answered", tally)
		}
		if d := counters.Delta(t, "Tcp.OutRsts"); d["Tcp.OutRsts"] != 0 {
			t.Fatalf("Tcp.OutRsts +%d, want 0", d["Tcp.OutRsts"])
		}
		stopAndWait(t, b)
	})
}

// TestUnitsVerify runs systemd-analyze verify on the example units (with
// ExecStart pointing at an existing binary): no unknown or bad setting.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("this test needs systemd-analyze (apt-get install systemd): %v", err)
	}
	dir := t.TempDir()
	for _, name := range []string{"zerodrop-example.socket", "zerodrop-example.service"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.ReplaceAll(string(b), "/usr/local/bin/zerodrop-example", os.Args[0]))
		b = []byte(strings.ReplaceAll(string(b), "/usr/local/bin/zerodrop ", os.Args[0]+" ")) // ExecReload=
		if name == "zerodrop-example.service" && !strings.Contains(string(b), "\nExecReload="+os.Args[0]+" upgrade ") {
			t.Fatalf("%s has no ExecReload= running zerodrop upgrade", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, analyze, "verify", "--man=no", "./zerodrop-example.socket", "./zerodrop-example.service")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

func inodeOf(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestParseCertKey: -cert and -key go together.
func TestParseCertKey(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{{nil, true}, {[]string{"-cert", "c.pem", "-key", "k.pem"}, true}, {[]string{"-cert", "c.pem"}, false}, {[]string{"-key", "k.pem"}, false}} {
		if _, err := parse(tc.args); (err == nil) != tc.ok {
			t.Errorf("parse(%q) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}
