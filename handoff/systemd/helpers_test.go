package systemd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
	"golang.org/x/sys/unix"
)

// Environment variables that configure the helpers.
const (
	envNext = "ZD_NEXT" // listen-pid-exec: the helper to exec
	envTake = "ZD_TAKE" // report: "name,network,address" to take
	envGen  = "ZD_GEN"  // serve: the generation to report
	envCfg  = "ZD_CFG"  // serve: "1" to check options against reuseport defaults
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("listen-pid-exec", helperListenPIDExec)
	netnstest.RegisterHelper("report", helperReport)
	netnstest.RegisterHelper("serve", helperServe)
	netnstest.RegisterHelper("store-and-stop", helperStoreAndStop)
	netnstest.RegisterHelper("start-successor", helperStartSuccessor)
	netnstest.RegisterHelper("start-successor-and-exit", helperStartSuccessorAndExit)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// helperListenPIDExec does what systemd does between fork and exec: it sets
// LISTEN_PID to its own pid, then execs the test binary as the helper named
// by ZD_NEXT (same pid, same fds 3..).
func helperListenPIDExec() {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvListenPID+"=") && !strings.HasPrefix(kv, "ZERODROP_TEST_HELPER=") {
			env = append(env, kv)
		}
	}
	env = append(env, EnvListenPID+"="+strconv.Itoa(os.Getpid()), "ZERODROP_TEST_HELPER="+os.Getenv(envNext))
	exe, err := os.Executable()
	if err == nil {
		err = syscall.Exec(exe, os.Args, env)
	}
	fmt.Fprintln(os.Stderr, "listen-pid-exec:", err)
	os.Exit(2)
}

// report is what the report helper prints, as one JSON line.
type report struct {
	Err       string   `json:"err"`
	Is        []string `json:"is"`        // the sentinels that match
	Types     []string `json:"types"`     // typed errors found with errors.As, with details
	Env       string   `json:"env"`       // LISTEN_* after Activated
	CloExec   []bool   `json:"cloexec"`   // FD_CLOEXEC of fds 3..5 after Activated
	Available []string `json:"available"` // a.Available() before the take
	Tickets   string   `json:"tickets"`   // what a.Tickets() gave: "", "keys=N" imported, or the import's error
	TakeErr   string   `json:"take_err"`
	TakeIs    []string `json:"take_is"`
	TakeTypes []string `json:"take_types"`
	Took      string   `json:"took"` // the listener's address
}

var sentinels = []struct {
	name string
	err  error
}{
	{"ErrListenPID", ErrListenPID}, {"ErrListenFDs", ErrListenFDs}, {"ErrListenFDNames", ErrListenFDNames},
	{"ErrFDMissing", ErrFDMissing}, {"ErrNotSocket", ErrNotSocket}, {"ErrTickets", ErrTickets}, {"ErrKind", ErrKind}, {"ErrNotFound", ErrNotFound},
}

func matching(err error) (is, types []string) {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, one := err.(*FDError); !one {
			list = j.Unwrap() // errors.Join of several errors
		}
	}
	if list == nil && err != nil {
		list = []error{err}
	}
	for _, e := range list {
		var ee *EnvError
		var fe *FDError
		var ne *NotFoundError
		switch {
		case errors.As(e, &ee):
			types = append(types, "EnvError "+ee.Var)
		case errors.As(e, &fe):
			types = append(types, fmt.Sprintf("FDError %s fd=%d name=%s", fe.Op, fe.FD, fe.Name))
		case errors.As(e, &ne):
			types = append(types, fmt.Sprintf("NotFoundError %s %v", ne.Name, ne.Have))
		}
	}
	return is, types
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// helperReport calls Activated (and Listener when ZD_TAKE is set) and prints
// what it got.
func helperReport() {
	a, err := Activated()
	var r report
	r.Err = errString(err)
	r.Is, r.Types = matching(err)
	r.Env = os.Getenv(EnvListenPID) + os.Getenv(EnvListenFDs) + os.Getenv(EnvListenFDNames)
	for fd := 3; fd <= 5; fd++ {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		r.CloExec = append(r.CloExec, err == nil && flags&unix.FD_CLOEXEC != 0)
	}
	r.Available = a.Available()
	if f, ok := a.Tickets(); ok {
		r.Tickets = importTickets(f)
	}
	if t := os.Getenv(envTake); t != "" {
		p := strings.Split(t, ",")
		l, err := a.Listener(context.Background(), p[0], p[1], p[2], nil)
		r.TakeErr = errString(err)
		r.TakeIs, r.TakeTypes = matching(err)
		if l != nil {
			r.Took = l.Addr().String()
			l.Close()
		}
	}
	if err := a.Close(); err != nil {
		r.Err += " close: " + err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(r)
}

// importTickets reads the keys of f into fresh Keys, and closes f.
func importTickets(f *os.File) string {
	defer f.Close()
	k, err := ticket.New()
	if err != nil {
		return err.Error()
	}
	defer k.Close()
	if err := k.Import(f); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("keys=%d", k.Len())
}

// helperServe is a service generation started with its listener passed the
// systemd way: it takes "http", reports "ready <inode> <pid>", answers every
// connection with "gen=<g> inode=<inode> pid=<pid>" after reading a line, and
// sends READY=1 when NOTIFY_SOCKET is set. It exits on SIGTERM.
func helperServe() {
	ctx := context.Background()
	// Before anything that lets the test send SIGTERM (the ready line, an
	// answer): installed later, a SIGTERM that came first killed the helper.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	a, err := Activated()
	if err != nil || a == nil {
		fatal("serve: activated: %v (nil: %v)", err, a == nil)
	}
	var l net.Listener
	diffs := "-"
	if os.Getenv(envCfg) == "1" {
		l, err = a.Listener(ctx, "http", "tcp", "", &reuseport.Config{})
	} else {
		l, diffs, err = takeAndCompare(ctx, a)
	}
	if err != nil {
		fatal("serve: %v", err)
	}
	ino := inodeOf(l.(syscall.Conn))
	fmt.Printf("ready %d %d %s\n", ino, os.Getpid(), diffs)
	if err := FromEnv().Ready(fmt.Sprintf("generation %s serving", os.Getenv(envGen))); err != nil {
		fatal("serve: %v", err)
	}
	go answer(l, fmt.Sprintf("gen=%s inode=%d pid=%d\n", os.Getenv(envGen), ino, os.Getpid()))
	<-sig
}

// helperStoreAndStop is generation 1 of the fd-store restart: it listens,
// stores the listener with FDSTORE=1, reports ready, serves until SIGTERM,
// then sends STOPPING=1, closes its listener, says "stopped" and exits when
// its stdin closes.
func helperStoreAndStop() {
	n := FromEnv()
	l, err := reuseport.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		fatal("store: %v", err)
	}
	if err := n.Store("http", l); err != nil {
		fatal("store: %v", err)
	}
	if err := n.Ready("generation 1 serving"); err != nil {
		fatal("store: %v", err)
	}
	ino := inodeOf(l)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Printf("ready %s %d\n", l.Addr(), ino)
	go answer(l, fmt.Sprintf("gen=1 inode=%d pid=%d\n", ino, os.Getpid()))
	<-sig
	if err := n.Stopping("generation 1 draining"); err != nil {
		fatal("store: %v", err)
	}
	l.Close()
	fmt.Println("stopped")
	io.Copy(io.Discard, os.Stdin)
}

// takeAndCompare takes "http" and reports how its options differ from
// reuseport's defaults: the differing option names, comma-separated, or "none".
func takeAndCompare(ctx context.Context, a *Activation) (net.Listener, string, error) {
	f, ok, err := a.Take("http", "tcp", "")
	if err != nil || !ok {
		return nil, "", fmt.Errorf("take http: ok=%v: %v", ok, err)
	}
	defer f.Close()
	diffs := "none"
	var me *reuseport.OptionMismatchError
	if err := CheckOptions(ctx, f, &reuseport.Config{}); errors.As(err, &me) {
		diffs = ""
		for _, d := range me.Diffs {
			diffs += fmt.Sprintf("%s:%s->%s,", d.Option, d.Want, d.Got)
		}
	} else if err != nil {
		return nil, "", err
	}
	l, err := net.FileListener(f)
	return l, diffs, err
}

func answer(l net.Listener, reply string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				io.WriteString(c, reply)
			}
		}()
	}
}

func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// inodeOf returns the socket's inode (fstat st_ino), 0 on error.
func inodeOf(c syscall.Conn) uint64 {
	var st unix.Stat_t
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil || serr != nil {
		return 0
	}
	return st.Ino
}

// lines reads a helper's stdout line by line, each read bounded.
type lines struct {
	p *netnstest.Proc
	r *bufio.Reader
}

func readerOf(p *netnstest.Proc) *lines { return &lines{p: p, r: bufio.NewReader(p.Stdout)} }

func (l *lines) next(t *testing.T) string {
	t.Helper()
	l.p.Stdout.SetReadDeadline(time.Now().Add(20 * time.Second))
	s, err := l.r.ReadString('\n')
	if err != nil {
		t.Fatalf("helper output: %q: %v", s, err)
	}
	return strings.TrimSuffix(s, "\n")
}

// request sends one line to addr and returns the reply line.
func request(t *testing.T, addr string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	s, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reply from %s: %q: %v", addr, s, err)
	}
	return strings.TrimSuffix(s, "\n")
}
