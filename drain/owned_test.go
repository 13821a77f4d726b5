package drain_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
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
	cfg := handoff.Config{Path: os.Getenv(envOwnPath), Timeout: 30 * time.Second, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}}
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
	if err := u.Ready(); err != nil {
		return err
	}
	fmt.Printf("ready %d %d\n", u.Generation(), os.Getpid())
	<-u.Exit()
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
						o := netnstest.HelperOptions{Credential: cred, Env: env}
						if tc.pidns {
							o.Env = append(o.Env, envOwnProc+"=1")
							o.Setup = func(cmd *exec.Cmd) { cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWPID | syscall.CLONE_NEWNS }
						}
						return o
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
