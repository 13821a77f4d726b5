package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// fakeKernel serves a fixed namespace: a group of two on 127.0.0.1:8080
// (one member over its backlog) and a lone listener on [::]:9090 with a
// steering group (its slot, and the draining slot of a closed listener).
func fakeKernel(migrate bool) kernel {
	a, b := netip.MustParseAddrPort("127.0.0.1:8080"), netip.MustParseAddrPort("[::]:9090")
	server := func(pid int) reuseport.Process { return reuseport.Process{PID: pid, Comm: "server"} }
	gs := []reuseport.Group{
		{Addr: a, Members: []reuseport.Member{
			{Addr: a, Inode: 10, UID: 1000, Queue: 20, Backlog: 1, CPU: reuseport.CPUNone, Processes: []reuseport.Process{server(100)}},
			{Addr: a, Inode: 11, UID: 1000, Queue: 3, Backlog: 4096, CPU: reuseport.CPUNone, Processes: []reuseport.Process{server(101), server(102)}},
		}},
		{Addr: b, Members: []reuseport.Member{{Addr: b, Inode: 30, UID: 0, Queue: 0, Backlog: 511, Cookie: 300, CPU: reuseport.CPUUnknown}}},
	}
	return kernel{
		netns: func() (uint64, error) { return 4026531840, nil },
		groups: func(_ context.Context, port uint16) ([]*reuseport.Group, error) {
			var out []*reuseport.Group
			for _, g := range gs {
				if port == 0 || g.Addr.Port() == port {
					g.Unreadable = []int{1}
					out = append(out, &g)
				}
			}
			return out, nil
		},
		migrateReq: func() (bool, error) { return migrate, nil },
		counters: func() (reuseport.Counters, error) {
			return reuseport.Counters{MigrateReqSuccess: 20, ListenOverflows: 7, ListenDrops: 7, OutRsts: 5}, nil
		},
		steer:      fakeSteer,
		pause:      func(context.Context) error { return nil },
		onlineCPUs: func() ([]int, error) { return []int{0, 1}, nil },
	}
}

// fakeSteer has a steering group for [::]:9090 only.
func fakeSteer(_ context.Context, dir string, addr netip.AddrPort) ([]steer.Slot, string, error) {
	if addr != netip.MustParseAddrPort("[::]:9090") {
		return nil, "", fmt.Errorf("steer open %s: %w", addr, steer.ErrNoGroup)
	}
	return []steer.Slot{
		{Index: 0, State: steer.Live, Class: 7, Weight: 100, Load: 3, Cookie: 300,
			Counters: steer.Counters{Steered: 41, MigratedIn: 5}},
		{Index: 1, State: steer.Draining, Class: 7, Weight: 100, Cookie: 301,
			Counters: steer.Counters{Steered: 12, MigratedOut: 5, Dropped: 1}},
		{Index: 2, State: steer.Free},
	}, dir + "/4026531840/::-9090", nil
}

// Example shows the table doctor prints (here for a made-up namespace; run
// "zerodrop doctor" for the real one).
func Example() {
	doctorMain(context.Background(), nil, stdout{}, stdout{}, fakeKernel(false))
	// Output:
	// net.ipv4.tcp_migrate_req = 0 (netns 4026531840)
	//
	// ADDRESS         LISTENERS  INODE  UID   QUEUE  BACKLOG  CPU  PIDS
	// 127.0.0.1:8080  2          10     1000  20     1        -    100(server)
	//                            11     1000  3      4096     -    101(server) 102(server)
	// [::]:9090       1          30     0     0      511      ?    -
	//
	// steering [::]:9090 (pins /sys/fs/bpf/zerodrop/4026531840/::-9090): 2 slot(s) taken
	//   SLOT  STATE     INODE  CLASS  WEIGHT  LOAD  STEERED  MIGRATED-IN  MIGRATED-OUT  DROPPED
	//   0     live      30     7      100     3     41       5            0             0
	//   1     draining  -      7      100     0     12       0            5             1
	// note: could not read the fds of 1 process(es) [1] (another user's, without root?): PIDs may be missing
	//
	// counters: TCPMigrateReqSuccess 20  TCPMigrateReqFailure 0  ListenOverflows 7  ListenDrops 7  OutRsts 5  EstabResets 0
	//   Namespace-wide totals. With tcp_migrate_req=0 a closed member's queue is reset and only
	//   OutRsts/EstabResets move: zero migration counters then prove nothing. TCPMigrateReqSuccess also
	//   counts MPTCP connections the kernel fast-closed. ListenOverflows/ListenDrops are SYNs dropped by a
	//   full queue (the client retries about 1 s later); only a rise between two reads (--watch) means it
	//   happens now.
	//
	// migration-disabled: reuseport groups exist (127.0.0.1:8080 with 2 listeners) and net.ipv4.tcp_migrate_req is 0: closing a member resets every connection in its accept queue, and no TcpExt counter shows it (only Tcp.OutRsts)
	//   fix: sysctl -w net.ipv4.tcp_migrate_req=1 in this network namespace (persist it in /etc/sysctl.d/), or drain each member's queue before closing it
	//
	// queue-over-backlog: 127.0.0.1:8080 inode 10 (pid 100 server) holds 20 connections in its accept queue, more than its backlog 1 admits (2): migration from a closed sibling overflowed it, and it drops new SYNs until it accepts them
	//   fix: give every member of the group the same backlog, large enough for a sibling's queue (listen backlog and net.core.somaxconn), and keep every member accepting
}

// stdout lets the Example print through doctorMain's writer.
type stdout struct{}

func (stdout) Write(b []byte) (int, error) { return fmt.Print(string(b)) }

func TestDoctorFakeKernel(t *testing.T) {
	r, code := doctorJSON(t, fakeKernel(true))
	if code != exitProblems || !slices.Equal(codes(r), []string{codeQueueOverBacklog}) {
		t.Errorf("exit %d, problems %v; want 1, [%s]", code, codes(r), codeQueueOverBacklog)
	}
	if len(r.Groups) != 2 || r.Groups[0].Address != "127.0.0.1" || r.Groups[0].Port != 8080 || r.Groups[1].Address != "::" {
		t.Errorf("groups %+v, want 127.0.0.1:8080 then [::]:9090", r.Groups)
	}
	if m := r.Groups[1].Members[0]; m.PIDs == nil || m.Commands == nil {
		t.Errorf("member without owners %+v: pids and commands must be [], not null", m)
	}
	r, _ = doctorJSON(t, fakeKernel(false), "--port", "9090")
	if len(r.Groups) != 1 || len(r.Problems) != 0 {
		t.Errorf("--port 9090: groups %+v problems %+v, want one group and no problem", r.Groups, r.Problems)
	}
}

// cpu-uncovered needs a member that sets SO_INCOMING_CPU and an online CPU
// no member prefers; unreadable members are counted in the message.
func TestCPUsUncovered(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		want int
	}{{[]int{-1, -1}, 0}, {[]int{0}, 1}, {[]int{0, 0, -1}, 1}, {[]int{0, 1}, 0}, {[]int{1, 0, -1}, 0}, {[]int{0, -2}, 1}, {[]int{-2, -2}, 0}} {
		g := group{Address: "127.0.0.1", Port: 1}
		for _, c := range tc.cpus {
			g.Members = append(g.Members, member{CPU: c})
		}
		ps := cpusUncovered(&report{OnlineCPUs: []int{0, 1}, Groups: []group{g}})
		if len(ps) != tc.want || (tc.want > 0 && ps[0].Code != codeCPUUncovered) {
			t.Errorf("members of cpus %v: problems %+v, want %d", tc.cpus, ps, tc.want)
		}
		if slices.Contains(tc.cpus, -2) && len(ps) > 0 && !strings.Contains(ps[0].Message, "1 members' CPU could not be read") {
			t.Errorf("members of cpus %v: message %q does not count the unreadable one", tc.cpus, ps[0].Message)
		}
	}
}

// A full queue (backlog+1) is what listen admits by itself: not over.
func TestQueueOverBacklogBoundary(t *testing.T) {
	for _, tc := range []struct {
		queue, backlog uint32
		want           int
	}{{2, 1, 0}, {3, 1, 1}, {1, 0, 0}, {2, 0, 1}, {4096, 4096, 0}, {4098, 4096, 1}} {
		r := &report{Groups: []group{{Address: "127.0.0.1", Port: 1, Members: []member{{Queue: tc.queue, Backlog: tc.backlog}}}}}
		if got := len(queuesOverBacklog(r)); got != tc.want {
			t.Errorf("queue %d backlog %d: %d problems, want %d", tc.queue, tc.backlog, got, tc.want)
		}
	}
}

// Exit status 2 when any read of the kernel fails, and the error is printed.
func TestDoctorCannotRead(t *testing.T) {
	boom := os.NewSyscallError("open", syscall.EACCES)
	for _, tc := range []struct {
		name    string
		breakIt func(k *kernel)
	}{
		{"groups", func(k *kernel) {
			k.groups = func(context.Context, uint16) ([]*reuseport.Group, error) { return nil, fmt.Errorf("inspect: %w", boom) }
		}},
		{"sysctl", func(k *kernel) { k.migrateReq = func() (bool, error) { return false, boom } }},
		{"counters", func(k *kernel) { k.counters = func() (reuseport.Counters, error) { return reuseport.Counters{}, boom } }},
		{"netns", func(k *kernel) { k.netns = func() (uint64, error) { return 0, boom } }},
		{"cpus", func(k *kernel) { k.onlineCPUs = func() ([]int, error) { return nil, boom } }},
		{"watch", func(k *kernel) { k.pause = func(context.Context) error { return context.Canceled } }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := fakeKernel(true)
			tc.breakIt(&k)
			var out, errOut bytes.Buffer
			code := doctorMain(context.Background(), []string{"--watch"}, &out, &errOut, k)
			if code != exitUsage || out.Len() != 0 || !strings.Contains(errOut.String(), "could not read the kernel") {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, the error", code, out.String(), errOut.String())
			}
		})
	}
}

// A kernel without tcp_migrate_req: migrate_req is null and the fix says so.
func TestDoctorOldKernel(t *testing.T) {
	k := fakeKernel(true)
	k.migrateReq = func() (bool, error) { return false, fmt.Errorf("%w: no sysctl", reuseport.ErrNotSupported) }
	r, code := doctorJSON(t, k)
	if code != exitProblems || r.MigrateReq != nil || !slices.Contains(codes(r), codeMigrationDisabled) {
		t.Fatalf("exit %d, migrate_req %v, problems %v; want 1, null, %s", code, r.MigrateReq, codes(r), codeMigrationDisabled)
	}
	if !strings.Contains(r.Problems[0].Fix, "5.14") {
		t.Errorf("fix %q does not name the kernel version", r.Problems[0].Fix)
	}
}

func TestRunUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, exitUsage}, {[]string{"bogus"}, exitUsage}, {[]string{"help"}, exitOK},
		{[]string{"doctor", "--port", "70000"}, exitUsage}, {[]string{"doctor", "--nope"}, exitUsage},
		{[]string{"doctor", "extra"}, exitUsage}, {[]string{"doctor", "-h"}, exitOK},
	} {
		var out, errOut bytes.Buffer
		if got := run(context.Background(), tc.args, &out, &errOut); got != tc.want {
			t.Errorf("run %q = %d, want %d (stderr %q)", tc.args, got, tc.want, errOut.String())
		}
	}
}

// The steer object: on the steered group only, free slots left out, the slot
// holder found by cookie.
func TestDoctorFakeSteer(t *testing.T) {
	r, _ := doctorJSON(t, fakeKernel(false), "--bpffs", "/x")
	if r.Groups[0].Steer != nil {
		t.Errorf("127.0.0.1:8080: steer %+v, want none", r.Groups[0].Steer)
	}
	want := &steerInfo{Dir: "/x/4026531840/::-9090", Slots: []steerSlot{
		{Index: 0, State: "live", Inode: 30, Cookie: 300, Class: 7, Weight: 100, Load: 3, Steered: 41, MigratedIn: 5},
		{Index: 1, State: "draining", Cookie: 301, Class: 7, Weight: 100, Steered: 12, MigratedOut: 5, Dropped: 1},
	}}
	if got := r.Groups[1].Steer; got == nil || got.Dir != want.Dir || !slices.Equal(got.Slots, want.Slots) {
		t.Errorf("[::]:9090: steer %+v, want %+v", got, want)
	}
}

// Steering errors never fail doctor: no bpffs or no permission is one note
// for all groups, any other error one note per group.
func TestDoctorSteerErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   error
		notes int
	}{
		{"no bpffs", fmt.Errorf("steer open: %w: /sys/fs/bpf is sysfs", steer.ErrNoBPFFS), 1},
		{"permission", fmt.Errorf("steer open: %w: %w", steer.ErrPermission, os.ErrPermission), 1},
		{"other", fmt.Errorf("steer open: %w", steer.ErrIncompatible), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := fakeKernel(true)
			k.steer = func(context.Context, string, netip.AddrPort) ([]steer.Slot, string, error) { return nil, "", tc.err }
			r, code := doctorJSON(t, k)
			if code != exitProblems || !slices.Equal(codes(r), []string{codeQueueOverBacklog}) {
				t.Errorf("exit %d, problems %v; want 1, [%s] as without steering", code, codes(r), codeQueueOverBacklog)
			}
			n := steerNotes(r)
			if len(n) != tc.notes || !strings.Contains(n[0], tc.err.Error()) {
				t.Errorf("notes %q, want %d saying %q", n, tc.notes, tc.err)
			}
			if r.Groups[0].Steer != nil || r.Groups[1].Steer != nil {
				t.Errorf("steer objects %+v, %+v; want none", r.Groups[0].Steer, r.Groups[1].Steer)
			}
		})
	}
}

// A steering program with a live slot migrates whatever tcp_migrate_req
// says: no migration-disabled for that group. Draining slots alone do not.
func TestMigrationDisabledSteered(t *testing.T) {
	for _, tc := range []struct {
		state steer.State
		want  []string
	}{{steer.Live, []string{codeQueueOverBacklog}}, {steer.Draining, []string{codeMigrationDisabled, codeQueueOverBacklog}}} {
		k := fakeKernel(false)
		k.steer = func(_ context.Context, _ string, a netip.AddrPort) ([]steer.Slot, string, error) {
			if a.Port() != 8080 {
				return nil, "", steer.ErrNoGroup
			}
			return []steer.Slot{{Index: 0, State: tc.state, Weight: 100}}, "/pins", nil
		}
		if r, _ := doctorJSON(t, k); !slices.Equal(codes(r), tc.want) {
			t.Errorf("8080 steered, slot %s: problems %v, want %v", tc.state, codes(r), tc.want)
		}
	}
}
