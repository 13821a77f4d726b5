package reuseport

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

// build puts each listener in the group its key names, groups by port then
// address and members by inode, and addHolders gives every group the scan's
// processes, unreadable PIDs and note.
func TestBuild(t *testing.T) {
	a := netip.MustParseAddrPort("127.0.0.1:8080")
	b := netip.MustParseAddrPort("[::]:9090")
	c := netip.MustParseAddrPort("[::]:8080")
	ls := []sockdiag.Listener{
		{Addr: b, Inode: 30, UID: 0, Backlog: 511, Cookie: 300},
		{Addr: a, Inode: 11, UID: 1000, Queue: 3, Backlog: 4096},
		{Addr: c, Inode: 40},
		{Addr: a, Inode: 10, UID: 1000, Queue: 20, Backlog: 1},
	}
	gs := build(7, ls, func(x netip.AddrPort) (netip.AddrPort, bool) { return x, true })
	var got []string
	for _, g := range gs {
		got = append(got, g.Addr.String())
		if g.NetNS != 7 {
			t.Errorf("group %s netns %d, want 7", g.Addr, g.NetNS)
		}
	}
	if want := []string{"127.0.0.1:8080", "[::]:8080", "[::]:9090"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	if m := gs[0].Members; len(m) != 2 || m[0].Inode != 10 || m[1].Inode != 11 || m[0].Queue != 20 || m[0].CPU != CPUUnknown {
		t.Errorf("127.0.0.1:8080 members %+v, want inodes 10 then 11, CPU unknown", m)
	}
	if m := gs[2].Members; len(m) != 1 || m[0].Cookie != 300 || m[0].Backlog != 511 {
		t.Errorf("[::]:9090 members %+v", m)
	}
	addHolders(gs, map[uint64][]sockdiag.Process{10: {{PID: 100, Comm: "server"}}, 30: {{PID: 101}, {PID: 102}}}, []int{1})
	if p := gs[0].Member(10).Processes; len(p) != 1 || p[0].PID != 100 || p[0].Comm != "server" {
		t.Errorf("inode 10 holders %+v", p)
	}
	if pids := gs[2].PIDs(); !reflect.DeepEqual(pids, []int{101, 102}) {
		t.Errorf("[::]:9090 PIDs %v", pids)
	}
	for _, g := range gs {
		if !reflect.DeepEqual(g.Unreadable, []int{1}) || g.Note == "" {
			t.Errorf("group %s unreadable %v note %q, want [1] and a note", g.Addr, g.Unreadable, g.Note)
		}
	}
	if gs[0].Member(99) != nil {
		t.Error("Member(99) found a member")
	}
	// Past 8 groups build looks them up by map: 12 ports of 2 members each,
	// interleaved.
	var many []sockdiag.Listener
	for i := range 24 {
		many = append(many, sockdiag.Listener{Addr: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(100+i%12)), Inode: uint64(1000 - i)})
	}
	mgs := build(7, many, func(x netip.AddrPort) (netip.AddrPort, bool) { return x, true })
	if len(mgs) != 12 {
		t.Fatalf("%d groups of 12 ports, want 12", len(mgs))
	}
	for i, g := range mgs {
		if g.Addr.Port() != uint16(100+i) || len(g.Members) != 2 || g.Members[0].Inode > g.Members[1].Inode {
			t.Errorf("group %d: %s with %+v, want port %d with 2 members by inode", i, g.Addr, g.Members, 100+i)
		}
	}
	// One key for every match: the group of one address.
	one := build(7, ls, func(x netip.AddrPort) (netip.AddrPort, bool) { return a, x.Port() == 8080 })
	if len(one) != 1 || one[0].Addr != a || len(one[0].Members) != 3 {
		t.Errorf("one group %+v, want 3 members under %s", one, a)
	}
}
