package handoff

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("app", appMain)
	netnstest.RegisterHelper("rawpeer", rawpeerMain)
	netnstest.RegisterHelper("squatter", squatterMain)
	netnstest.RegisterHelper("dialer", dialerMain)
	netnstest.RegisterHelper("receiver", receiverMain)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// Environment of the "app" helper.
const (
	envPath = "ZD_HANDOFF_PATH" // handoff socket
	envMode = "ZD_MODE"         // "serve" (default), "hold", "pause", "gate"
	envN    = "ZD_LISTENERS"    // extra listeners "x0".."xN-1" (default 0)
	envPID  = "ZD_PIDFILE"
	envAddr = "ZD_ADDR" // address of "http" (default 127.0.0.1:0)
	// ZD_SYSTEMD=1: act as if socket-activated with fd 3 named "http"
	envSystemd = "ZD_SYSTEMD"
	// ZD_WAIT=1: print "started", then wait for a line on stdin before New
	envWait = "ZD_WAIT"
	// ZD_CONNS: take the predecessor's connections of "http": "echo"
	// answers each line with "gen <g> <state> <line>"; "die" exits
	// (status 3) once a batch is received, before acking it.
	envConns = "ZD_CONNS"
	// ZD_ALLOW_UIDS: Config.AllowUIDs, comma-separated
	envAllow = "ZD_ALLOW_UIDS"
)

func fdCount() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents) - 1
}

// appMain is a tiny server run as its own process: it obtains "http" (plus
// ZD_LISTENERS extra listeners) through an Upgrader, answers each connection
// with its generation, calls Ready, and on Exit closes its listeners, drains
// and exits. It reports on stdout:
//
//	ready <generation> <pid> <addr> <inode of http> <inode of the handoff socket>
//	received <generation>          (mode hold: has the fds, never Ready)
//	paused                         (mode pause: predecessor stopped after a batch;
//	                                mode gate: it waits for a line on stdin, then goes on)
//	exit <fds now> <fds at start>
//	error <message>
func appMain() {
	l, _ := net.Listen("tcp", "127.0.0.1:0") // open the netpoller's fds first
	l.Close()
	base := fdCount()
	if err := app(base); err != nil {
		fmt.Fprintf(os.Stderr, "app pid %d: %v\n", os.Getpid(), err)
		fmt.Printf("error %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

func app(base int) error {
	ctx := context.Background()
	mode := os.Getenv(envMode)
	if mode == "pause" {
		hook := func(int) { fmt.Println("paused"); time.Sleep(time.Hour) }
		testHookBatchSent.Store(&hook)
	}
	if mode == "gate" { // hold each batch until the test writes a line (or closes stdin)
		in := bufio.NewReader(os.Stdin)
		hook := func(int) { fmt.Println("paused"); in.ReadString('\n') }
		testHookBatchSent.Store(&hook)
	}
	if os.Getenv(envWait) != "" { // started early: wait for the go
		fmt.Println("started")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
	}
	if os.Getenv(envSystemd) != "" { // what systemd sets after fork: fd 3 is "http"
		os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
		os.Setenv("LISTEN_FDS", "1")
		os.Setenv("LISTEN_FDNAMES", "http")
	}
	var allow []uint32
	for _, s := range strings.FieldsFunc(os.Getenv(envAllow), func(r rune) bool { return r == ',' }) {
		uid, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return err
		}
		allow = append(allow, uint32(uid))
	}
	u, err := New(ctx, Config{Path: os.Getenv(envPath), PIDFile: os.Getenv(envPID), AllowUIDs: allow, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}})
	if err != nil {
		return err
	}
	addr := os.Getenv(envAddr)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := u.Listen(ctx, "http", "tcp4", addr)
	if err != nil {
		return err
	}
	n, _ := strconv.Atoi(os.Getenv(envN))
	extra := make([]net.Listener, n)
	for i := range extra {
		if extra[i], err = u.Listen(ctx, "x"+strconv.Itoa(i), "tcp4", "127.0.0.1:0"); err != nil {
			return err
		}
	}
	if c := os.Getenv(envConns); c != "" {
		if c == "die" {
			testHookConnsReceived = func(int) { os.Exit(3) }
		}
		var cwg sync.WaitGroup
		defer cwg.Wait()
		if err := u.HandleConns("http", func(pc PassedConn) {
			cwg.Add(1)
			go func() { defer cwg.Done(); echoConn(pc, u.Generation()) }()
		}); err != nil {
			return err
		}
	}
	if mode == "hold" {
		fmt.Printf("received %d\n", u.Generation())
		time.Sleep(time.Hour)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); acceptLoop(ln, u.Generation(), &wg) }()
	if err := u.Ready(); err != nil {
		return err
	}
	fmt.Printf("ready %d %d %s %d %d\n", u.Generation(), os.Getpid(), ln.Addr(), sockIno(ln.(syscall.Conn)), sockIno(u.srv.ln))
	if os.Getenv("ZD_DEBUG") != "" {
		fmt.Fprintf(os.Stderr, "app pid %d: generation %d ready (fallback: %v)\n", os.Getpid(), u.Generation(), u.FallbackReason())
	}
	<-u.Exit()
	ln.Close()
	for _, x := range extra {
		x.Close()
	}
	wg.Wait()
	u.Close()
	fmt.Printf("exit %d %d\n", fdCount(), base)
	return nil
}

// acceptLoop serves each connection: read one line, answer "gen <g>\n".
func acceptLoop(ln net.Listener, gen uint64, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
				return
			}
			fmt.Fprintf(c, "gen %d\n", gen)
		}()
	}
}

// echoConn answers each line of a passed connection (its state first, then
// what the socket holds) with "gen <g> <state> <line>", until EOF or 20 s.
func echoConn(pc PassedConn, gen uint64) {
	defer pc.Conn.Close()
	pc.Conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(io.MultiReader(strings.NewReader(string(pc.State)), pc.Conn))
	for range 1000 {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		if _, err := fmt.Fprintf(pc.Conn, "gen %d %s %s", gen, pc.Listener, line); err != nil {
			return
		}
	}
}

// request makes one request and returns the generation that answered.
func request(addr string) (uint64, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "q\n"); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("read after %q: %w", line, err)
	}
	var g uint64
	if _, err := fmt.Sscanf(line, "gen %d", &g); err != nil {
		return 0, err
	}
	return g, nil
}

// load runs workers that each make requests back to back until stop.
type load struct {
	stop   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	ok     int
	errs   []error
	seqs   [][]uint64 // per worker, the generation of each answer
	lat    []sample   // every answered request
	maxGen uint64
}

// sample is one answered request: when it started and how long it took.
type sample struct {
	at time.Time
	d  time.Duration
}

// p99 returns the 99th percentile of the latencies of samples for which in
// is true, and how many there were.
func p99(ss []sample, in func(sample) bool) (time.Duration, int) {
	var ds []time.Duration
	for _, s := range ss {
		if in(s) {
			ds = append(ds, s.d)
		}
	}
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)*99/100], len(ds)
}

func startLoad(t *testing.T, addr string, workers int) *load {
	l := &load{stop: make(chan struct{}), seqs: make([][]uint64, workers)}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 10_000_000; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				t0 := time.Now()
				g, err := request(addr)
				d := time.Since(t0)
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					l.ok++
					l.seqs[w] = append(l.seqs[w], g)
					l.lat = append(l.lat, sample{t0, d})
					l.maxGen = max(l.maxGen, g)
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *load) snapshot() (ok int, errs []error, maxGen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok, append([]error(nil), l.errs...), l.maxGen
}

// waitAnswers waits until the load got n more answers (bounded).
func (l *load) waitAnswers(t *testing.T, n int) {
	t.Helper()
	start, _, _ := l.snapshot()
	for i := 0; i < 3000; i++ {
		if ok, _, _ := l.snapshot(); ok >= start+n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("load made fewer than %d requests in 15 s", n)
}

// app is a started "app" helper with its stdout lines.
type appProc struct {
	*netnstest.Proc
	lines chan string
}

func startApp(t *testing.T, path string, env ...string) *appProc {
	t.Helper()
	return startAppIn(t, path, nil, env...)
}

// startAppIn starts the app with stdin.
func startAppIn(t *testing.T, path string, stdin *os.File, env ...string) *appProc {
	t.Helper()
	return startHelper(t, "app", path, stdin, env...)
}

// startHelper starts a helper with the app's environment and line reader.
func startHelper(t *testing.T, helper, path string, stdin *os.File, env ...string) *appProc {
	t.Helper()
	opts := netnstest.HelperOptions{Env: append([]string{envPath + "=" + path}, env...)}
	if stdin != nil {
		opts.Stdin = stdin
	}
	p := netnstest.StartHelper(t, helper, opts)
	a := &appProc{Proc: p, lines: make(chan string, 16)}
	go func() {
		defer close(a.lines)
		sc := bufio.NewScanner(p.Stdout)
		for sc.Scan() {
			a.lines <- sc.Text()
		}
	}()
	return a
}

// expect waits (bounded) for the next line and checks its first word.
func (a *appProc) expect(t *testing.T, word string) []string {
	t.Helper()
	select {
	case line, ok := <-a.lines:
		f := strings.Fields(line)
		if !ok || len(f) == 0 || f[0] != word {
			t.Fatalf("app pid %d: got %q (open=%v), want %q ...", a.Cmd.Process.Pid, line, ok, word)
		}
		return f
	case <-time.After(60 * time.Second):
		t.Fatalf("app pid %d: no %q line in 60 s", a.Cmd.Process.Pid, word)
	}
	return nil
}

// handoffPath returns a handoff socket path in a private directory.
func handoffPath(t *testing.T) string {
	return t.TempDir() + "/handoff.sock"
}
