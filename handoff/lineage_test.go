package handoff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

// sockIno returns the inode of a socket (fstat of its fd), 0 on error.
func sockIno(c syscall.Conn) uint64 {
	var ino uint64
	linux.Control(c, func(fd int) error {
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		ino = st.Ino
		return err
	})
	return ino
}

// squatterMain binds ZD_HANDOFF_PATH (a unix stream socket) again and again
// until its stdin closes (at most 10 minutes). It prints "spinning" once it
// runs, "stolen <tries>" if a bind ever succeeds (it then listens on the name
// and holds it), and "tries <n> <errno of the last failure>" at the end.
func squatterMain() {
	path := os.Getenv(envPath)
	quit := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(quit) }()
	fmt.Println("spinning")
	deadline := time.Now().Add(10 * time.Minute)
	var last error
	for tries := 0; tries < 1e9 && time.Now().Before(deadline); tries++ {
		select {
		case <-quit:
			fmt.Printf("tries %d %v\n", tries, last)
			return
		default:
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			fmt.Printf("error socket: %v\n", err)
			return
		}
		if last = unix.Bind(fd, &unix.SockaddrUnix{Name: path}); last == nil {
			unix.Listen(fd, 16)
			fmt.Printf("stolen %d\n", tries)
			<-quit
			return
		}
		unix.Close(fd)
	}
	fmt.Println("error deadline")
}

// Item: an abstract handoff name is never free between handoffs. A process
// of another uid (nobody) binds the name in a loop while 100 handoffs run
// (in this process: the predecessor and successor Upgraders take the same
// code paths as in two processes), then a real successor process takes over
// and hands back to this process: every handoff succeeds, the squatter never
// binds the name, the handoff socket is the same socket throughout, and no fd
// or goroutine leaks.
func TestAbstractNameNeverFree(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		path := fmt.Sprintf("@zerodrop-lineage-%d", os.Getpid())
		cfg := Config{Path: path, Timeout: 20 * time.Second}
		cur, curLn := readyGen(t, cfg, nil)
		hsIno := sockIno(cur.srv.ln)

		stdin, feed, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		p := netnstest.StartHelper(t, "squatter", netnstest.HelperOptions{
			Path: netnstest.ExecutableCopy(t), Credential: &syscall.Credential{Uid: nobody, Gid: nobody},
			Env: []string{envPath + "=" + path}, Stdin: stdin,
		})
		stdin.Close()
		sq := &appProc{Proc: p, lines: lines(p.Stdout)}
		sq.expect(t, "spinning")
		defer func() {
			feed.Close()
			sq.Kill()
		}()

		const handoffs = 100
		moved := "" // checked after the squatter: the name is the point
		for i := range handoffs {
			next, ln := readyGen(t, cfg, cur)
			select {
			case line := <-sq.lines:
				t.Fatalf("handoff %d: squatter said %q", i+1, line)
			default:
			}
			if g := next.Generation(); g != uint64(i+2) {
				t.Fatalf("handoff %d: generation %d", i+1, g)
			}
			if ino := sockIno(next.srv.ln); ino != hsIno && moved == "" {
				moved = fmt.Sprintf("handoff %d: handoff socket inode %d, was %d", i+1, ino, hsIno)
			}
			curLn.Close()
			cur.Close()
			cur, curLn = next, ln
		}
		if moved != "" {
			t.Fatal(moved)
		}
		// A real process takes over, and hands back to us.
		app := startApp(t, path)
		f := app.expect(t, "ready")
		<-cur.Exit()
		curLn.Close()
		cur.Close()
		if f[1] != strconv.Itoa(handoffs+2) || f[5] != strconv.FormatUint(hsIno, 10) {
			t.Fatalf("successor process: %v, want generation %d on handoff socket %d", f, handoffs+2, hsIno)
		}
		back, backLn := readyGen(t, cfg, nil)
		app.expect(t, "exit")
		if code := waitExit(t, app.Proc); code != 0 {
			t.Fatalf("successor process exited %d", code)
		}
		if back.Generation() != handoffs+3 || sockIno(back.srv.ln) != hsIno {
			t.Fatalf("back in this process: generation %d, handoff socket %d", back.Generation(), sockIno(back.srv.ln))
		}
		feed.Close()
		if f := sq.expect(t, "tries"); f[2] != "address" {
			t.Fatalf("squatter: %v, want its binds refused with EADDRINUSE", f)
		} else {
			t.Logf("squatter tried %s binds, all refused", f[1])
		}
		if code := waitExit(t, sq.Proc); code != 0 {
			t.Fatalf("squatter exited %d", code)
		}
		backLn.Close()
		back.Close()
	})
}

// readyGen makes a generation with one listener "http" and calls Ready; with
// pred, it waits for pred's Exit (a nil pred is an outside predecessor).
func readyGen(t *testing.T, cfg Config, pred *Upgrader) (*Upgrader, net.Listener) {
	t.Helper()
	ctx := context.Background()
	u, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { u.Close() })
	ln, err := u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err == nil {
		t.Cleanup(func() { ln.Close() })
	}
	if err == nil {
		err = u.Ready()
	}
	if err != nil {
		u.Close()
		t.Fatalf("generation %d: %v", u.Generation(), err)
	}
	if pred != nil {
		select {
		case <-pred.Exit():
		case <-time.After(30 * time.Second):
			t.Fatal("predecessor's Exit not closed")
		}
	}
	return u, ln
}

// next reads the next line of an app process (bounded).
func (a *appProc) next(t *testing.T) []string {
	t.Helper()
	select {
	case line, ok := <-a.lines:
		if !ok {
			t.Fatalf("app pid %d: stdout closed", a.Cmd.Process.Pid)
		}
		return strings.Fields(line)
	case <-time.After(60 * time.Second):
		t.Fatalf("app pid %d: no line in 60 s", a.Cmd.Process.Pid)
	}
	return nil
}

// Item: two successors started at the same moment never make two lineages.
// 50 rounds, under load (a new connection per request), of two successor
// processes told to go together: in each round one wins (generation g+1);
// the other is told ErrHandoffInProgress and exits non-zero, or inherits from
// the winner (g+2). The "http" listener and the handoff socket are the same
// sockets in every generation, and no request fails.
func TestRacingSuccessors(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const rounds = 50
		path := handoffPath(t)
		old := startApp(t, path)
		f := old.expect(t, "ready")
		addr, lnIno, hsIno := f[3], f[4], f[5]
		snap := netnstest.Snapshot(t)
		ld := startLoad(t, addr, 4)
		ld.waitAnswers(t, 50)
		gen := 1
		refused, chained := 0, 0
		var hsInos []string // checked last: the lineage is the point
		for round := range rounds {
			var apps [2]*appProc
			var gates [2]*os.File
			for i := range apps {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				apps[i] = startAppIn(t, path, r, envWait+"=1")
				r.Close()
				gates[i] = w
				apps[i].expect(t, "started")
			}
			for _, w := range gates {
				w.WriteString("go\n")
			}
			for _, w := range gates {
				w.Close()
			}
			var ready []*appProc
			var gens []int
			for _, a := range apps {
				f := a.next(t)
				switch {
				case len(f) == 6 && f[0] == "ready":
					if f[3] != addr || f[4] != lnIno {
						t.Fatalf("round %d: %v, want %s with listener %s: a second lineage", round, f, addr, lnIno)
					}
					hsInos = append(hsInos, f[5])
					ready = append(ready, a)
					gens = append(gens, atoi(f[1]))
				case len(f) > 0 && f[0] == "error" && strings.Contains(strings.Join(f, " "), ErrHandoffInProgress.Error()):
					if code := waitExit(t, a.Proc); code == 0 {
						t.Fatalf("round %d: the refused successor exited 0", round)
					}
					refused++
				default:
					t.Fatalf("round %d: successor said %v", round, f)
				}
			}
			switch {
			case len(ready) == 1 && gens[0] == gen+1:
			case len(ready) == 2 && min(gens[0], gens[1]) == gen+1 && max(gens[0], gens[1]) == gen+2:
				// the loser waited in the handoff socket's queue and
				// inherited from the winner
				chained++
				if gens[0] > gens[1] {
					ready[0], ready[1] = ready[1], ready[0]
				}
				if f := ready[0].expect(t, "exit"); f[1] != f[2] {
					t.Fatalf("round %d: generation %d exits with %s fds, started with %s", round, gen+1, f[1], f[2])
				}
			default:
				t.Fatalf("round %d: generations %v became ready after generation %d: two lineages", round, gens, gen)
			}
			if f := old.expect(t, "exit"); f[1] != f[2] {
				t.Fatalf("round %d: generation %d exits with %s fds, started with %s", round, gen, f[1], f[2])
			}
			if code := waitExit(t, old.Proc); code != 0 {
				t.Fatalf("round %d: generation %d exited %d", round, gen, code)
			}
			old, gen = ready[len(ready)-1], gen+len(ready)
			ld.waitAnswers(t, 10)
		}
		ld.end()
		ok, errs, maxGen := ld.snapshot()
		d := snap.Delta(t, "Tcp.OutRsts", "Tcp.EstabResets", "TcpExt.ListenOverflows", "TcpExt.ListenDrops")
		t.Logf("%d rounds: %d losers refused in progress, %d inherited from the winner; generation %d; %d requests answered, %d failed; counters %v",
			rounds, refused, chained, gen, ok, len(errs), d)
		if len(errs) != 0 {
			t.Fatalf("%d failed requests, first: %v", len(errs), errs[0])
		}
		for i, ino := range hsInos {
			if ino != hsIno {
				t.Fatalf("successor %d served handoff socket %s, the first generation %s", i, ino, hsIno)
			}
		}
		if int(maxGen) != gen {
			t.Fatalf("newest generation answering %d, want %d", maxGen, gen)
		}
		if d["Tcp.OutRsts"] != 0 || d["TcpExt.ListenDrops"] != 0 {
			t.Fatalf("connections lost: %v", d)
		}
		old.Kill()
	})
}

// Item: a predecessor that holds the handoff socket but never answers (its
// serve loop is wedged: the connect succeeds, nothing accepts) makes New fail
// within Timeout with ErrNoAnswer in a *net.OpError, logged as
// handoff.no_answer, instead of hanging or starting a second lineage beside
// it; nothing leaks.
func TestPredecessorNoAnswer(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		path := handoffPath(t)
		pred := startRawPeer(t, path, rolePredecessor, "mute")
		defer pred.Kill()
		pred.expect(t, "listening")
		netnstest.CheckLeaks(t)
		core, logs := observer.New(zap.InfoLevel)
		done := make(chan error, 1)
		go func() {
			u, err := New(context.Background(), Config{Path: path, Timeout: time.Second, Logger: zap.New(core)})
			if err == nil {
				u.Close()
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("New still waits after 60 s with a Timeout of 1 s")
		}
		var oe *net.OpError
		if !errors.Is(err, ErrNoAnswer) || !errors.As(err, &oe) || oe.Op != "handoff" || oe.Addr.String() != path {
			t.Fatalf("New: %v, want ErrNoAnswer in a *net.OpError handoff %s", err, path)
		}
		t.Logf("%v", err)
		if n := logs.FilterField(zap.String("event", "handoff.no_answer")).Len(); n != 1 {
			t.Fatalf("%d handoff.no_answer events, want 1", n)
		}
		if logs.FilterField(zap.String("event", "handoff.fresh")).Len() != 0 {
			t.Fatal("New started fresh beside a live predecessor")
		}
	})
}
