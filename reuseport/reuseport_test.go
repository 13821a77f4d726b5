package reuseport_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("join", helperJoin)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

var ctx = context.Background()

func listen(t *testing.T, c *reuseport.Config, addr string) *reuseport.Listener {
	t.Helper()
	l, err := c.Listen(ctx, "tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// answer accepts n connections from l, reads each client's bytes and echoes
// them back prefixed with "ok ". It returns what the clients had sent.
func answer(t *testing.T, l net.Listener, n int, wait time.Duration) []string {
	t.Helper()
	var got []string
	l.(interface{ SetDeadline(time.Time) error }).SetDeadline(time.Now().Add(wait))
	for range n {
		c, err := l.Accept()
		if err != nil {
			break
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			got = append(got, line)
			io.WriteString(c, "ok "+line)
		}
		c.Close()
	}
	return got
}

var migrationKeys = []string{"TcpExt.TCPMigrateReqSuccess", "TcpExt.TCPMigrateReqFailure", "Tcp.OutRsts"}

// KERNEL.md, "Closing a member with connections in its accept queue": 20 clients
// queued at A, B joins, A closes.
func TestCloseWithQueue(t *testing.T) {
	for _, tc := range []struct {
		migrate                  int
		accepted, answered, rsts int
		success                  int64
	}{
		{migrate: 1, accepted: 20, answered: 20, rsts: 0, success: 20},
		{migrate: 0, accepted: 0, answered: 0, rsts: 20, success: 0},
	} {
		t.Run(fmt.Sprintf("migrate=%d", tc.migrate), func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: tc.migrate}, func(t *testing.T) {
				var cfg reuseport.Config
				a := listen(t, &cfg, "127.0.0.1:0")
				clients := netnstest.Queue(t, a.Addr().String(), 20, netnstest.ClientOptions{})
				netnstest.WaitQueue(t, a, 20)
				b := listen(t, &cfg, a.Addr().String())
				before := netnstest.Snapshot(t)
				a.Close()
				sent := answer(t, b, 20, time.Second)
				tally := clients.Await(3 * time.Second)
				d := before.Delta(t, migrationKeys...)
				if len(sent) != tc.accepted {
					t.Errorf("B accepted %d with their bytes, want %d", len(sent), tc.accepted)
				}
				for i, s := range sent {
					if !strings.HasPrefix(s, "client ") {
						t.Errorf("connection %d carried %q, want the client's bytes", i, s)
					}
				}
				if tally[netnstest.Answered] != tc.answered || tally[netnstest.Reset] != tc.rsts {
					t.Errorf("clients: %v, want answered=%d reset=%d", tally, tc.answered, tc.rsts)
				}
				want := map[string]int64{"TcpExt.TCPMigrateReqSuccess": tc.success, "TcpExt.TCPMigrateReqFailure": 0, "Tcp.OutRsts": int64(tc.rsts)}
				for k, v := range want {
					if d[k] != v {
						t.Errorf("%s delta = %d, want %d", k, d[k], v)
					}
				}
			})
		})
	}
}

// A lone member has no sibling to migrate to: all 10 are reset either way, and
// Failure counts them only when the sysctl is on.
func TestLoneMemberClose(t *testing.T) {
	for _, migrate := range []int{1, 0} {
		t.Run(fmt.Sprintf("migrate=%d", migrate), func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: migrate}, func(t *testing.T) {
				a := listen(t, &reuseport.Config{}, "127.0.0.1:0")
				clients := netnstest.Queue(t, a.Addr().String(), 10, netnstest.ClientOptions{})
				netnstest.WaitQueue(t, a, 10)
				before := netnstest.Snapshot(t)
				a.Close()
				tally := clients.Await(3 * time.Second)
				d := before.Delta(t, migrationKeys...)
				if tally[netnstest.Reset] != 10 {
					t.Errorf("clients: %v, want 10 reset", tally)
				}
				if want := int64(10 * migrate); d["TcpExt.TCPMigrateReqFailure"] != want || d["TcpExt.TCPMigrateReqSuccess"] != 0 {
					t.Errorf("deltas %v, want Failure %d, Success 0", d, want)
				}
			})
		})
	}
}

// TCP_INFO on a listener: tcpi_unacked is the queue, tcpi_sacked the backlog;
// sock_diag agrees.
func TestQueueDepth(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l := listen(t, &reuseport.Config{Options: reuseport.Options{Backlog: 5}}, "127.0.0.1:0")
		netnstest.Queue(t, l.Addr().String(), 3, netnstest.ClientOptions{})
		netnstest.WaitQueue(t, l, 3)
		q, err := l.Queue()
		if err != nil || q != (reuseport.Queue{Len: 3, Backlog: 5}) {
			t.Fatalf("Queue() = %+v, %v; want {3 5}", q, err)
		}
		g, err := reuseport.Inspect(ctx, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if len(g.Members) != 1 || g.Members[0].Queue != 3 || g.Members[0].Backlog != 5 {
			t.Fatalf("Inspect members = %+v, want one with queue 3 backlog 5", g.Members)
		}
		if pids := g.PIDs(); len(pids) != 1 || pids[0] != os.Getpid() {
			t.Fatalf("PIDs = %v, want [%d]", pids, os.Getpid())
		}
		// The holder-less read and the port's read show the same member.
		lean, err := reuseport.InspectMembers(ctx, l.Addr().String())
		if err != nil || len(lean.Members) != 1 || lean.Members[0].Inode != g.Members[0].Inode || lean.Members[0].Queue != 3 || len(lean.PIDs()) != 0 {
			t.Fatalf("InspectMembers = %+v, %v; want the member without processes", lean, err)
		}
		port := l.Addr().(*net.TCPAddr).AddrPort().Port()
		gs, err := reuseport.InspectPort(ctx, port)
		if err != nil || len(gs) != 1 || gs[0].Addr.String() != l.Addr().String() || gs[0].Member(g.Members[0].Inode) == nil || !slices.Equal(gs[0].PIDs(), g.PIDs()) {
			t.Fatalf("InspectPort(%d) = %+v, %v; want the one group, held by us", port, gs, err)
		}
	})
}

// helperJoin tries to join the group at ZERODROP_ADDR and prints the outcome as JSON.
func helperJoin() {
	var out struct {
		Err         string
		UIDMismatch bool
		Theirs      []uint32
		Ours        uint32
		PIDs        []int
		Note        string
	}
	l, err := reuseport.Listen(ctx, "tcp4", os.Getenv("ZERODROP_ADDR"))
	if err == nil {
		out.Err = "joined"
		l.Close()
	} else {
		out.Err = err.Error()
		out.UIDMismatch = errors.Is(err, reuseport.ErrUIDMismatch)
		var ue *reuseport.UIDMismatchError
		if errors.As(err, &ue) {
			out.Theirs, out.Ours, out.PIDs, out.Note = ue.Theirs, ue.Ours, ue.PIDs, ue.Note
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if os.Getenv("ZERODROP_HOLD") == "1" { // keep a listener for the parent to join
		l, err := reuseport.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			os.Exit(1)
		}
		fmt.Println(l.Addr())
		io.Copy(io.Discard, os.Stdin)
	}
}

func TestUIDMismatch(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l := listen(t, &reuseport.Config{}, "127.0.0.1:0")
		exe := netnstest.ExecutableCopy(t)
		nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
		p := netnstest.StartHelper(t, "join", netnstest.HelperOptions{Path: exe, Credential: nobody, Env: []string{"ZERODROP_ADDR=" + l.Addr().String()}})
		var got struct {
			Err         string
			UIDMismatch bool
			Theirs      []uint32
			Ours        uint32
			PIDs        []int
			Note        string
		}
		if err := json.NewDecoder(p.Stdout).Decode(&got); err != nil {
			t.Fatal(err)
		}
		t.Logf("uid 65534 joining a root group: %s", got.Err)
		if !got.UIDMismatch || len(got.Theirs) != 1 || got.Theirs[0] != 0 || got.Ours != 65534 {
			t.Fatalf("got %+v, want ErrUIDMismatch naming uid 0, ours 65534", got)
		}
		// uid 65534 cannot read root's /proc/PID/fd: no PIDs, and the error says why.
		if len(got.PIDs) != 0 || !strings.Contains(got.Note, "could not read the fds") {
			t.Fatalf("got PIDs %v, note %q; want none, and a note on the unreadable fds", got.PIDs, got.Note)
		}

		// The other way round, root can see who holds the group: its PID is named.
		r, w, _ := os.Pipe()
		defer w.Close()
		h := netnstest.StartHelper(t, "join", netnstest.HelperOptions{Path: exe, Credential: nobody, Stdin: r,
			Env: []string{"ZERODROP_ADDR=127.0.0.1:1", "ZERODROP_HOLD=1"}})
		r.Close()
		sc := bufio.NewScanner(h.Stdout)
		sc.Scan() // the join outcome
		if !sc.Scan() {
			t.Fatal("helper did not report its listener")
		}
		addr := strings.TrimSpace(sc.Text())
		_, err := reuseport.Listen(ctx, "tcp4", addr)
		var ue *reuseport.UIDMismatchError
		if !errors.Is(err, reuseport.ErrUIDMismatch) || !errors.As(err, &ue) {
			t.Fatalf("root joining uid 65534's group: %v, want ErrUIDMismatch", err)
		}
		if len(ue.Theirs) != 1 || ue.Theirs[0] != 65534 || ue.Ours != 0 || len(ue.PIDs) != 1 || ue.PIDs[0] != h.Cmd.Process.Pid {
			t.Fatalf("got %+v, want theirs [65534], ours 0, pids [%d]", ue, h.Cmd.Process.Pid)
		}
		t.Logf("root joining a uid 65534 group: %v", err)
	})
}

// A listener without SO_REUSEPORT gives its own error, naming it.
func TestNotReusable(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		plain, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		_, err = reuseport.Listen(ctx, "tcp4", plain.Addr().String())
		var ae *reuseport.AddrInUseError
		if !errors.Is(err, reuseport.ErrNotReusable) || !errors.As(err, &ae) || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("err = %v, want ErrNotReusable wrapping EADDRINUSE", err)
		}
		if errors.Is(err, reuseport.ErrUIDMismatch) {
			t.Fatalf("err = %v also matches ErrUIDMismatch", err)
		}
		if len(ae.Holders) != 1 || len(ae.Holders[0].Processes) != 1 || ae.Holders[0].Processes[0].PID != os.Getpid() {
			t.Fatalf("holders = %+v, want this process", ae.Holders)
		}
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "listen" || oe.Addr.String() != plain.Addr().String() {
			t.Fatalf("err = %#v, want *net.OpError listen %s", err, plain.Addr())
		}
		t.Log(err)
	})
}
