package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/reuseport"
)

// Two reuseport listeners of this process on one port, one listener of a
// helper running as nobody on another, clients queued: doctor reports every
// member's UID, PIDs, command, queue and backlog exactly.
func TestDoctorGroups(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		l1 := listen(t, "127.0.0.1:0", 16)
		l2 := listen(t, fmt.Sprintf("127.0.0.1:%d", port(l1)), 16)
		p := netnstest.StartHelper(t, "listen", netnstest.HelperOptions{
			Path:       netnstest.ExecutableCopy(t),
			Env:        []string{"BACKLOG=8"},
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
		})
		var nobodyPort int
		if _, err := fmt.Fscan(p.Stdout, &nobodyPort); err != nil {
			t.Fatalf("helper port: %v", err)
		}
		netnstest.Queue(t, fmt.Sprintf("127.0.0.1:%d", port(l1)), 6, netnstest.ClientOptions{})
		netnstest.Queue(t, fmt.Sprintf("127.0.0.1:%d", nobodyPort), 4, netnstest.ClientOptions{})
		eventually(t, "6 connections queued in the group", func() bool { return queueLen(t, l1)+queueLen(t, l2) == 6 })
		eventually(t, "4 connections queued at the helper", func() bool {
			ls, err := sockdiag.Listeners(uint16(nobodyPort))
			return err == nil && len(ls) == 1 && ls[0].Queue == 4
		})

		r, code := doctorJSON(t, linuxKernel())
		if code != exitOK || len(r.Problems) != 0 {
			t.Errorf("exit %d, problems %+v; want 0 and none", code, r.Problems)
		}
		if r.MigrateReq == nil || *r.MigrateReq != 1 {
			t.Errorf("migrate_req = %v, want 1", r.MigrateReq)
		}
		if len(r.Groups) != 2 {
			t.Fatalf("groups = %+v, want 2", r.Groups)
		}
		self := []int{os.Getpid()}
		comm := readComm(t, os.Getpid())
		for _, l := range []*reuseport.Listener{l1, l2} {
			g, m, ok := find(r, inode(t, l))
			want := member{Inode: inode(t, l), UID: 0, PIDs: self, Commands: []string{comm}, Queue: queueLen(t, l), Backlog: 16}
			if !ok || g.Address != "127.0.0.1" || int(g.Port) != port(l1) || len(g.Members) != 2 || !equal(m, want) {
				t.Errorf("group %+v member %+v, want 127.0.0.1:%d with 2 members, %+v", g, m, port(l1), want)
			}
		}
		g := r.Groups[slices.IndexFunc(r.Groups, func(g group) bool { return int(g.Port) == nobodyPort })]
		want := member{UID: 65534, PIDs: []int{p.Cmd.Process.Pid}, Commands: []string{readComm(t, p.Cmd.Process.Pid)}, Queue: 4, Backlog: 8}
		if len(g.Members) != 1 || g.Address != "127.0.0.1" {
			t.Fatalf("helper group %+v, want one member on 127.0.0.1", g)
		}
		want.Inode = g.Members[0].Inode
		if !equal(g.Members[0], want) {
			t.Errorf("helper member %+v, want %+v", g.Members[0], want)
		}

		// --port shows one group only.
		r, _ = doctorJSON(t, linuxKernel(), "--port", strconv.Itoa(nobodyPort))
		if len(r.Groups) != 1 || int(r.Groups[0].Port) != nobodyPort {
			t.Errorf("--port %d: groups %+v", nobodyPort, r.Groups)
		}
	})
}

func equal(a, b member) bool {
	return a.Inode == b.Inode && a.UID == b.UID && slices.Equal(a.PIDs, b.PIDs) &&
		slices.Equal(a.Commands, b.Commands) && a.Queue == b.Queue && a.Backlog == b.Backlog
}

func readComm(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// migration-disabled appears exactly when a group has more than one member
// and the sysctl is 0.
func TestDoctorMigrationDisabled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		migrate   int
		listeners int
		want      []string
	}{
		{"group/migrate=0", 0, 2, []string{codeMigrationDisabled}},
		{"group/migrate=1", 1, 2, []string{}},
		{"single/migrate=0", 0, 1, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: tc.migrate}, func(t *testing.T) {
				l := listen(t, "127.0.0.1:0", 0)
				for range tc.listeners - 1 {
					listen(t, l.Addr().String(), 0)
				}
				r, code := doctorJSON(t, linuxKernel())
				if !slices.Equal(codes(r), tc.want) {
					t.Errorf("problems %+v, want codes %v", r.Problems, tc.want)
				}
				if wantCode := min(len(tc.want), exitProblems); code != wantCode {
					t.Errorf("exit %d, want %d", code, wantCode)
				}
				if len(r.Groups) != 1 || len(r.Groups[0].Members) != tc.listeners {
					t.Errorf("groups %+v, want one with %d members", r.Groups, tc.listeners)
				}
			})
		})
	}
}

// KERNEL.md: migration ignores the target's backlog. 20 queued at a member,
// a sibling with listen(1) joins, the member closes: the sibling holds all 20.
func TestDoctorQueueOverBacklog(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		big := listen(t, "127.0.0.1:0", 0)
		clients := netnstest.Queue(t, big.Addr().String(), 20, netnstest.ClientOptions{})
		eventually(t, "20 queued", func() bool { return queueLen(t, big) == 20 })
		small := listen(t, big.Addr().String(), 1)

		r, code := doctorJSON(t, linuxKernel())
		if code != exitOK || len(r.Problems) != 0 {
			t.Fatalf("before the close: exit %d, problems %+v; want 0, none", code, r.Problems)
		}
		before, err := reuseport.ReadCounters()
		if err != nil {
			t.Fatal(err)
		}
		big.Close()
		r, code = doctorJSON(t, linuxKernel())
		if code != exitProblems || !slices.Equal(codes(r), []string{codeQueueOverBacklog}) {
			t.Fatalf("after the close: exit %d, problems %+v; want 1, [%s]", code, r.Problems, codeQueueOverBacklog)
		}
		if _, m, ok := find(r, inode(t, small)); !ok || m.Queue != 20 || m.Backlog != 1 {
			t.Errorf("listen(1) member %+v, want queue 20 backlog 1", m)
		}
		if d := r.Counters.Sub(before); d.MigrateReqSuccess != 20 || d.MigrateReqFailure != 0 {
			t.Errorf("counters rose by %+v, want MigrateReqSuccess 20, Failure 0", d)
		}
		if msg := r.Problems[0].Message; !strings.Contains(msg, "holds 20 connections") {
			t.Errorf("message %q does not say how many", msg)
		}
		for range 20 {
			c, err := small.Accept()
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("ok"))
			c.Close()
		}
		if tally := clients.Await(5 * time.Second); tally[netnstest.Answered] != 20 {
			t.Errorf("clients %v, want 20 answered", tally)
		}
	})
}

// listen-overflows: SYNs dropped by a full listen(1) queue between the two
// reads of --watch, and only then.
func TestDoctorListenOverflows(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		l := listen(t, "127.0.0.1:0", 1)
		netnstest.Queue(t, l.Addr().String(), 2, netnstest.ClientOptions{})
		eventually(t, "queue full (2 for listen(1))", func() bool { return queueLen(t, l) == 2 })

		k := linuxKernel()
		k.pause = func(ctx context.Context) error {
			// Each dial sends one SYN, dropped by the full queue; the dial
			// gives up long before the SYN retransmit (1 s).
			tally := netnstest.Queue(t, l.Addr().String(), 3, netnstest.ClientOptions{DialTimeout: 200 * time.Millisecond}).Await(time.Second)
			if tally[netnstest.Timeout] != 3 {
				t.Errorf("overflowing clients %v, want 3 timeouts", tally)
			}
			return nil
		}
		r, code := doctorJSON(t, k, "--watch")
		if code != exitProblems || !slices.Equal(codes(r), []string{codeListenOverflows}) {
			t.Fatalf("exit %d, problems %+v; want 1, [%s]", code, r.Problems, codeListenOverflows)
		}
		if d := r.Delta; d == nil || d.ListenOverflows != 3 || d.ListenDrops != 3 {
			t.Errorf("counters_delta %+v, want ListenOverflows 3, ListenDrops 3", d)
		}
		if _, m, _ := find(r, inode(t, l)); m.Queue != 2 || m.Backlog != 1 {
			t.Errorf("member %+v, want queue 2 backlog 1 (full, not over)", m)
		}

		// The totals stay, but without a rise there is no problem.
		for _, args := range [][]string{{"--watch"}, {}} {
			r, code = doctorJSON(t, linuxKernel(), args...)
			if code != exitOK || len(r.Problems) != 0 || r.Counters.ListenOverflows != 3 {
				t.Errorf("%v: exit %d, problems %+v, ListenOverflows %d; want 0, none, 3", args, code, r.Problems, r.Counters.ListenOverflows)
			}
		}
	})
}

// A group whose members set SO_INCOMING_CPU: doctor shows each member's CPU,
// and reports cpu-uncovered while a pool has fewer listeners than CPUs (one
// listener on the first CPU), not once a listener per CPU joined.
func TestDoctorCPUCoverage(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		cpus, err := reuseport.OnlineCPUs()
		if err != nil {
			t.Fatal(err)
		}
		netnstest.SkipUnless(t, len(cpus) >= 2, fmt.Sprintf("one online CPU (%v): every group covers it", cpus))
		cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, Options: reuseport.Options{IncomingCPU: &cpus[0]}}
		first, err := cfg.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer first.Close()
		addr := first.Addr().String()
		plain := listen(t, addr, 0)
		r, code := doctorJSON(t, linuxKernel(), "--port", strconv.Itoa(port(first)))
		_, m, _ := find(r, inode(t, first))
		_, pm, _ := find(r, inode(t, plain))
		if code != exitProblems || !slices.Equal(codes(r), []string{codeCPUUncovered}) || m.CPU != cpus[0] || pm.CPU != reuseport.CPUNone {
			t.Fatalf("exit %d, problems %+v, cpus %d and %d; want 1, [%s], %d and -1", code, r.Problems, m.CPU, pm.CPU, codeCPUUncovered, cpus[0])
		}
		if want := fmt.Sprint(cpus[1:]); !strings.Contains(r.Problems[0].Message, "none prefers cpus "+want) {
			t.Errorf("message %q does not name cpus %s", r.Problems[0].Message, want)
		}
		rest, err := cfg.ListenPerCPU(context.Background(), "tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range rest {
			defer l.Close()
		}
		if r, code = doctorJSON(t, linuxKernel(), "--port", strconv.Itoa(port(first))); code != exitOK || len(r.Problems) != 0 {
			t.Errorf("with a listener per CPU: exit %d, problems %+v; want 0, none", code, r.Problems)
		}
	})
}
