package drain_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// Environment of the "owner" helper.
const (
	envOwnPath   = "ZD_OWN_PATH"   // handoff path
	envOwnAllow  = "ZD_OWN_ALLOW"  // a UID for Config.AllowUIDs
	envOwnNoDump = "ZD_OWN_NODUMP" // 1: prctl(PR_SET_DUMPABLE, 0) first
	envOwnAddr   = "ZD_OWN_ADDR"   // address of "http"
	envOwnProc   = "ZD_OWN_PROC"   // 1: mount a /proc of our PID namespace first (CLONE_NEWPID|CLONE_NEWNS)
	envOwnForget = "ZD_OWN_FORGET" // 1: take back handoff's mark before the drain, as if another tool had handed the socket on
	envOwnPID    = "ZD_OWN_PID"    // handoff.Config.PIDFile, whose directory the helper removes before Ready: Ready fails, and the helper drains
)

func init() { netnstest.RegisterHelper("owner", ownerMain) }

// ownerMain is one generation of a handoff-upgraded server whose listener is
// wrapped by drain: it answers each connection with "gen <g>\n", prints
// "ready <g> <pid>", and on Exit stops the listener (drain.Listener.Stop),
// prints "report <method> <still_listening>" and exits once its connections
// are answered.
func ownerMain() {
	if err := owner(); err != nil {
		fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

func owner() error {
	if os.Getenv(envOwnProc) != "" {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
		if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
			return fmt.Errorf("mount proc: %w", err)
		}
	}
	if os.Getenv(envOwnNoDump) != "" {
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return err
		}
	}
	ctx := context.Background()
	cfg := handoff.Config{Path: os.Getenv(envOwnPath), PIDFile: os.Getenv(envOwnPID), Timeout: 30 * time.Second, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}}
	if s := os.Getenv(envOwnAllow); s != "" {
		uid, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return err
		}
		cfg.AllowUIDs = []uint32{uint32(uid)}
	}
	u, err := handoff.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer u.Close()
	ln, err := u.Listen(ctx, "http", "tcp4", os.Getenv(envOwnAddr))
	if err != nil {
		return err
	}
	core, logs := observer.New(zap.WarnLevel)
	dl, err := drain.Wrap(ln, drain.Options{Logger: zap.New(core)})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := dl.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
					fmt.Fprintf(c, "gen %d\n", u.Generation())
				}
			}()
		}
	}()
	if p := os.Getenv(envOwnPID); p != "" {
		if err := os.Remove(filepath.Dir(p)); err != nil {
			return err
		}
	}
	if err := u.Ready(); err != nil {
		if os.Getenv(envOwnPID) == "" {
			return err
		}
		// As zerodrop.Serve does after "ready failed": drain and exit.
		fmt.Printf("unready %d %d\n", u.Generation(), os.Getpid())
	} else {
		fmt.Printf("ready %d %d\n", u.Generation(), os.Getpid())
		<-u.Exit()
	}
	if os.Getenv(envOwnForget) != "" {
		if err := linux.Control(dl, func(fd int) error { return shared.Unmark(fd, shared.Successor) }); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	r, err := dl.Stop(sctx)
	cancel()
	wg.Wait()
	if r == nil {
		return err
	}
	unsure := logs.FilterField(zap.String("event", "drain.unsure")).Len()
	fmt.Printf("report %s %v %d\n", r.Method, r.StillListening, unsure)
	return err
}

// ask sends one request and returns the generation that answered.
func ask(addr string) (int, error) {
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("x\n")); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, err
	}
	var g int
	if _, err := fmt.Sscanf(line, "gen %d", &g); err != nil {
		return 0, fmt.Errorf("answer %q: %w", line, err)
	}
	return g, nil
}

// ownerProc is a running "owner" helper and its stdout lines.
type ownerProc struct {
	*netnstest.Proc
	*netnstest.Lines
}

func startOwner(t *testing.T, opts netnstest.HelperOptions) *ownerProc {
	t.Helper()
	p := netnstest.StartHelper(t, "owner", opts)
	return &ownerProc{Proc: p, Lines: netnstest.ReadLines(p.Stdout)}
}

// TestHandedSocketReleased hands a listener from one process to its
// successor in cases where the predecessor cannot see the successor in
// /proc, with a client loop running throughout: the predecessor's drain must
// release the socket (never shut it down), no request may fail, and the
// successor must answer after the predecessor exited.
func TestHandedSocketReleased(t *testing.T) {
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	other := &syscall.Credential{Uid: 65533, Gid: 65534}
	cases := []struct {
		name       string
		pred, succ *syscall.Credential
		succEnv    []string
		pidns      bool // each generation in its own PID namespace, with its own /proc
	}{
		{name: "nondumpable", pred: nobody, succ: nobody, succEnv: []string{envOwnNoDump + "=1"}},
		{name: "other-uid", pred: nobody, succ: other, succEnv: []string{envOwnAllow + "=65534"}},
		{name: "pid-namespaces", pidns: true},
	}
	for _, tc := range cases {
		for _, forget := range []bool{false, true} {
			name := tc.name
			if forget {
				name += ",unmarked" // the drain.unsure path: only the scan's incompleteness protects the successor
			}
			t.Run(name, func(t *testing.T) {
				netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
					opts := func(cred *syscall.Credential, env []string) netnstest.HelperOptions {
						return ownerOpts(cred, env, tc.pidns)
					}
					predEnv := []string{envOwnAllow + "=65533"}
					if forget {
						predEnv = append(predEnv, envOwnForget+"=1")
					}
					testHanded(t, opts(tc.pred, predEnv), opts(tc.succ, tc.succEnv), forget)
				})
			})
		}
	}
}

// ownerOpts runs an "owner" helper as cred with env added, and with pidns in
// a PID namespace of its own, with its own /proc.
func ownerOpts(cred *syscall.Credential, env []string, pidns bool) netnstest.HelperOptions {
	o := netnstest.HelperOptions{Credential: cred, Env: env}
	if pidns {
		o.Env = append(o.Env, envOwnProc+"=1")
		o.Setup = func(cmd *exec.Cmd) { cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID | syscall.CLONE_NEWNS }
	}
	return o
}

// testHanded runs the predecessor with pred, then the successor with succ
// (Env added to the common environment; the last value of a key wins).
// unsure says the predecessor's drain must log drain.unsure (else it must not).
func testHanded(t *testing.T, pred, succ netnstest.HelperOptions, unsure bool) {
	bin := netnstest.ExecutableCopy(t)
	probe := listenTCP(t, "127.0.0.1:0")
	addr := probe.Addr().String()
	probe.Close()
	common := []string{envOwnPath + "=@zd-own-" + strconv.Itoa(os.Getpid()), envOwnAddr + "=" + addr}
	pred.Path, pred.Env = bin, append(append([]string{}, common...), pred.Env...)
	succ.Path, succ.Env = bin, append(append([]string{}, common...), succ.Env...)
	before := netnstest.Snapshot(t)

	p1 := startOwner(t, pred)
	p1.Expect(t, "ready")

	var stop atomic.Bool
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	t.Cleanup(func() { stop.Store(true); wg.Wait() })
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for !stop.Load() && time.Now().Before(deadline) {
				if _, err := ask(addr); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	p2 := startOwner(t, succ)
	p2.Expect(t, "ready")
	rep := p1.Expect(t, "report")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	werr := p1.Wait(ctx)
	cancel()
	// The client loop goes on after the predecessor exited.
	after := ok.Load()
	for i := 0; i < 200 && ok.Load() < after+200; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if werr != nil {
		t.Errorf("predecessor: %v", werr)
	}
	for i := range 20 {
		if g, err := ask(addr); err != nil || g != 2 {
			t.Fatalf("request %d after the predecessor exited: generation %d, %v; want 2", i, g, err)
		}
	}
	p2.Kill()
	d := before.Delta(t, "Tcp.OutRsts", "TcpExt.ListenDrops")
	t.Logf("predecessor report %v; %d answered, %d failed; counters %v", rep[1:], ok.Load(), failed.Load(), d)
	if rep[1] != string(drain.MethodRelease) || rep[2] != "true" {
		t.Errorf("predecessor stopped with method %s, still listening %s; want release, true", rep[1], rep[2])
	}
	if want := map[bool]string{false: "0", true: "1"}[unsure]; rep[3] != want {
		t.Errorf("predecessor logged drain.unsure %s times, want %s", rep[3], want)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d requests failed (first: %v)", n, firstErr.Load())
	}
}

// TestUnreadySuccessorReleases: a successor inherits the listener, then its
// Ready fails (its PID file's directory is missing) before the predecessor
// was told anything, and it drains as zerodrop.Serve does after "ready
// failed". The predecessor still serves the socket, and the successor cannot
// see it hold it: the predecessor is not dumpable, runs under another UID, or
// lives in another PID namespace. The successor's drain must release the
// socket (never shut it down, which would stop it in the predecessor too),
// and the predecessor must answer every request after the successor exited.
func TestUnreadySuccessorReleases(t *testing.T) {
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	other := &syscall.Credential{Uid: 65533, Gid: 65534}
	cases := []struct {
		name       string
		pred, succ *syscall.Credential
		predEnv    []string
		succEnv    []string
		pidns      bool
	}{
		{name: "nondumpable", pred: nobody, succ: nobody, predEnv: []string{envOwnNoDump + "=1"}},
		{name: "other-uid", pred: nobody, succ: other, predEnv: []string{envOwnAllow + "=65533"}, succEnv: []string{envOwnAllow + "=65534"}},
		{name: "pid-namespaces", pidns: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				opts := func(cred *syscall.Credential, env []string) netnstest.HelperOptions {
					return ownerOpts(cred, env, tc.pidns)
				}
				// The successor's PID file directory: its own, removed by
				// the successor itself after handoff.New checked it.
				// In a sticky directory (as /tmp) that it may remove.
				top, err := os.MkdirTemp("", "zd-unready-")
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.RemoveAll(top) })
				if err := os.Chmod(top, 0o777|os.ModeSticky); err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(top, "run")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if tc.succ != nil {
					if err := os.Chown(dir, int(tc.succ.Uid), int(tc.succ.Gid)); err != nil {
						t.Fatal(err)
					}
				}
				testUnready(t, opts(tc.pred, tc.predEnv), opts(tc.succ, append(tc.succEnv, envOwnPID+"="+filepath.Join(dir, "pid"))))
			})
		})
	}
}

func testUnready(t *testing.T, pred, succ netnstest.HelperOptions) {
	bin := netnstest.ExecutableCopy(t)
	probe := listenTCP(t, "127.0.0.1:0")
	addr := probe.Addr().String()
	probe.Close()
	common := []string{envOwnPath + "=@zd-unready-" + strconv.Itoa(os.Getpid()), envOwnAddr + "=" + addr}
	pred.Path, pred.Env = bin, append(append([]string{}, common...), pred.Env...)
	succ.Path, succ.Env = bin, append(append([]string{}, common...), succ.Env...)

	p1 := startOwner(t, pred)
	p1.Expect(t, "ready")
	p2 := startOwner(t, succ)
	p2.Expect(t, "unready")
	rep := p2.Expect(t, "report")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	werr := p2.Wait(ctx)
	cancel()
	if werr != nil {
		t.Errorf("successor: %v", werr)
	}
	t.Logf("successor's report %v", rep[1:])
	if rep[1] != string(drain.MethodRelease) || rep[2] != "true" {
		t.Errorf("the successor that never became ready stopped with method %s, still listening %s; want release, true", rep[1], rep[2])
	}
	answered := 0
	for i := range 20 {
		g, err := ask(addr)
		if err != nil || g != 1 {
			t.Errorf("request %d after the successor exited: generation %d, %v; want 1", i, g, err)
			continue
		}
		answered++
	}
	if answered != 20 {
		t.Errorf("the predecessor answered %d of 20 requests after its successor failed", answered)
	}
	p1.Kill()
}

// TestSharedLastHolder: a listener marked shared (Options.Shared) that no
// other process holds is released, never shut down, and the report says what
// that cost: the socket stopped at our close, its queue is the remainder (not
// "left queued"), and the clients were reset.
func TestSharedLastHolder(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		tl := listenTCP(t, "127.0.0.1:0")
		cs := netnstest.Queue(t, tl.Addr().String(), 3, netnstest.ClientOptions{})
		netnstest.WaitQueue(t, tl, 3)
		dl, err := drain.Wrap(tl, drain.Options{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := dl.Close(); err != nil {
			t.Fatal(err)
		}
		rep := dl.Report()
		if rep.Method != drain.MethodRelease || rep.Shared == "" || rep.StillListening || rep.QueuedAtStop != 3 || rep.LeftQueued != 0 || rep.Remainder != 3 {
			t.Errorf("report %+v, want release of a socket that stopped, 3 queued, 0 left queued, remainder 3", rep)
		}
		if tally := cs.Await(10 * time.Second); tally[netnstest.Reset] != 3 {
			t.Errorf("clients %v, want 3 reset (the report's remainder)", tally)
		}
	})
}

func init() { netnstest.RegisterHelper("stopper", stopperMain) }

// envStopHidepid: 1 makes the "stopper" helper mount /proc with hidepid=2 in
// a mount namespace of its own (CLONE_NEWNS), then become nobody.
const envStopHidepid = "ZD_STOP_HIDEPID"

// stopperMain listens on a fresh socket without accepting, prints
// "listening <addr> <pid>", waits for a line on stdin, stops the listener
// (drain.Listener.Close), then answers "ok\n" to the line of every
// connection Accept returns, and prints "report <method> <unsure events> <served>
// <remainder> <why>".
func stopperMain() {
	if err := stopper(); err != nil {
		fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

func stopper() error {
	if os.Getenv(envStopHidepid) != "" {
		// In our own mount namespace: a /proc that hides other users'
		// processes, then nobody's identity, without CAP_SYS_PTRACE.
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("make / private: %w", err)
		}
		if err := unix.Mount("proc", "/proc", "proc", 0, "hidepid=2"); err != nil {
			return fmt.Errorf("mount proc hidepid=2: %w", err)
		}
		if err := syscall.Setgid(65534); err != nil {
			return err
		}
		if err := syscall.Setuid(65534); err != nil {
			return err
		}
	}
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		return err
	}
	core, logs := observer.New(zap.WarnLevel)
	dl, err := drain.Wrap(ln, drain.Options{Logger: zap.New(core)})
	if err != nil {
		ln.Close()
		return err
	}
	fmt.Printf("listening %s %d\n", ln.Addr(), os.Getpid())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		dl.Close()
		return err
	}
	// No Accept runs during the stop, as when a server's accept loop is
	// busy: only the drain can take the queue.
	err = dl.Close()
	served := 0
	for {
		c, err := dl.Accept()
		if err != nil {
			break
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
			c.Write([]byte("ok\n"))
			served++
		}
		c.Close()
	}
	r := dl.Report()
	if r == nil {
		return err
	}
	unsure := logs.FilterField(zap.String("event", "drain.unsure")).Len()
	fmt.Printf("report %s %d %d %d %s\n", r.Method, unsure, served, r.Remainder, r.Why)
	return err
}

// TestUnreadableStranger: a drain running as nobody, with connections
// queued, while a process of another UID (its fds unreadable to us) that
// started after us is running. As our sibling (both children of the test),
// it could have inherited our socket: the stop must not shut the socket
// down, and, finding it held by nobody else after all, must still serve
// the queue (accept, then release). Outside our parent's tree (we run under
// a shell, the process is the test's child) it can hold our socket only if
// we sent it, which we did not: the scan is complete, and the stop accepts
// and shuts down as usual. Under a /proc mounted with hidepid=2, no process
// of another UID is even listed: the scan cannot be complete whatever the
// tree. Every queued client is answered in each case.
func TestUnreadableStranger(t *testing.T) {
	for _, tc := range []struct {
		name       string
		underShell bool
		hidepid    bool
		method     drain.Method
		unsure     string
	}{
		{"sibling", false, false, drain.MethodRelease, "1"},
		{"stranger", true, false, drain.MethodAccept, "0"},
		{"stranger,hidepid", true, true, drain.MethodRelease, "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				bin := netnstest.ExecutableCopy(t)
				stdin, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				opts := netnstest.HelperOptions{Path: bin, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Stdin: stdin}
				if tc.hidepid {
					opts.Credential = nil // the helper mounts /proc, then becomes nobody
					opts.Env = []string{envStopHidepid + "=1"}
				}
				opts.Setup = func(cmd *exec.Cmd) {
					if tc.hidepid {
						cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
					}
					if tc.underShell {
						// The shell forks the helper (the exit after it keeps
						// it from exec'ing): the helper's parent is the shell.
						cmd.Args = append([]string{"/bin/sh", "-c", `"$@"; exit $?`, "sh", cmd.Path}, cmd.Args[1:]...)
						cmd.Path = "/bin/sh"
					}
				}
				p := netnstest.StartHelper(t, "stopper", opts)
				stdin.Close()
				lines := netnstest.ReadLines(p.Stdout)
				got := lines.Expect(t, "listening")
				addr := got[1]
				pid, err := strconv.Atoi(got[2])
				if err != nil {
					t.Fatal(err)
				}
				defer syscall.Kill(pid, syscall.SIGKILL) // the stopper, by its PID (under the shell, not p's)
				if ppid := parentOf(t, pid); (ppid == os.Getpid()) == tc.underShell {
					t.Fatalf("the stopper's parent is %d (we are %d): the tree is not the case's", ppid, os.Getpid())
				}

				time.Sleep(30 * time.Millisecond) // a clock tick or more after the stopper started
				x := exec.Command("sleep", "60")
				x.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65533, Gid: 65533}}
				if err := x.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { x.Process.Kill(); x.Wait() }()

				before := netnstest.Snapshot(t)
				cs := netnstest.Queue(t, addr, 3, netnstest.ClientOptions{})
				waitListenQueue(t, addr, 3)
				w.Write([]byte("stop\n"))
				rep := lines.Expect(t, "report")
				tally := cs.Await(10 * time.Second)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := p.Wait(ctx); err != nil {
					t.Errorf("stopper: %v", err)
				}
				d := before.Delta(t, "Tcp.OutRsts")
				t.Logf("report %v; clients %v; counters %v", rep[1:], tally, d)
				if rep[1] != string(tc.method) || rep[2] != tc.unsure || rep[3] != "3" || rep[4] != "0" {
					t.Errorf("stop by %s, drain.unsure logged %s times, served %s, remainder %s; want %s, %s, 3, 0", rep[1], rep[2], rep[3], rep[4], tc.method, tc.unsure)
				}
				if why := strings.Join(rep[5:], " "); tc.hidepid && !strings.Contains(why, "hidepid=invisible") {
					t.Errorf("why %q, want the hidepid mount named (mountinfo spells hidepid=2 \"invisible\")", why)
				}
				if tally[netnstest.Answered] != 3 || d["Tcp.OutRsts"] != 0 {
					t.Errorf("clients %v, Tcp.OutRsts +%d; want 3 answered, +0", tally, d["Tcp.OutRsts"])
				}
			})
		})
	}
}

// parentOf reads pid's parent from /proc/PID/stat.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatal(err)
	}
	return ppid
}

// waitListenQueue waits (10 s at most) until the listener on addr, which the
// test does not hold, has n connections queued, as sock_diag shows.
func waitListenQueue(t *testing.T, addr string, n uint32) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	for range 1000 {
		ls, err := sockdiag.Listeners(ap.Port())
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) == 1 && ls[0].Queue >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the listener on %s never had %d connections queued", addr, n)
}
