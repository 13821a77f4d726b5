package reuseport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

// ErrPortZero is wrapped by the error of Inspect and InspectMembers for an
// address with port 0, which names no group.
var ErrPortZero = errors.New("port 0 names no group")

// Process is a process that holds a socket.
type Process struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	UID  uint32 `json:"uid"`
}

// Member is one TCP listener as the kernel reports it (NETLINK_SOCK_DIAG).
type Member struct {
	Addr    netip.AddrPort `json:"addr"`
	Inode   uint64         `json:"inode"`
	UID     uint32         `json:"uid"`     // socket owner
	Queue   uint32         `json:"queue"`   // accept-queue length
	Backlog uint32         `json:"backlog"` // listen backlog; the queue holds backlog+1
	Cookie  uint64         `json:"cookie"`  // SO_COOKIE
	// CPU is the member's SO_INCOMING_CPU: a CPU number, CPUNone, or
	// CPUUnknown (until Group.ReadCPUs reads it, or when no holder let it).
	CPU int `json:"cpu"`
	// Processes hold the member; always empty from InspectMembers.
	Processes []Process `json:"processes,omitempty"`
	// notHeld: ReadCPUs found that none of Processes held it any longer.
	notHeld bool
}

// String describes the member for error messages.
func (m Member) String() string {
	var ps []string
	for _, p := range m.Processes {
		ps = append(ps, fmt.Sprintf("%d(%s)", p.PID, p.Comm))
	}
	who := "no readable process"
	if len(ps) > 0 {
		who = "pid " + strings.Join(ps, ",")
	}
	return fmt.Sprintf("%s inode %d uid %d %s", m.Addr, m.Inode, m.UID, who)
}

// Group is what the kernel shows of the listeners on one address and port.
// It is the one description of a group in zerodrop: stats summarizes it,
// drain and zerodrop doctor read it, reuseport/steer adds its program.
type Group struct {
	Addr    netip.AddrPort `json:"addr"`  // the address looked at
	NetNS   uint64         `json:"netns"` // inode of the network namespace looked at
	Members []Member       `json:"members"`
	// Unreadable lists PIDs whose fds could not be read (another user's
	// processes, without root); their sockets show no process.
	Unreadable []int  `json:"unreadable,omitempty"`
	Note       string `json:"note,omitempty"`
}

// PIDs returns the PIDs holding any member.
func (g *Group) PIDs() []int {
	var out []int
	seen := map[int]bool{}
	for _, m := range g.Members {
		for _, p := range m.Processes {
			if !seen[p.PID] {
				seen[p.PID] = true
				out = append(out, p.PID)
			}
		}
	}
	return out
}

// Member returns the member whose socket inode is inode, or nil.
func (g *Group) Member(inode uint64) *Member {
	for i := range g.Members {
		if g.Members[i].Inode == inode {
			return &g.Members[i]
		}
	}
	return nil
}

// Inspect lists the TCP listeners bound exactly to address ("host:port", a
// literal IP) in the calling thread's network namespace, members sorted by
// inode, with the processes holding them (a best-effort scan of /proc/*/fd).
// Port 0 is refused (ErrPortZero). A ctx that has ended, before or during the
// scan, gives an error wrapping ctx.Err(). Errors are *net.OpError with Op
// "inspect" and the address. It needs no capability (holders of another
// user's sockets need root or CAP_SYS_PTRACE); Linux 3.3.
func Inspect(ctx context.Context, address string) (*Group, error) {
	return inspectAddr(ctx, address, true)
}

// InspectMembers is Inspect without reading /proc: one NETLINK_SOCK_DIAG
// dump of the port and nothing else, cheap enough for every metrics scrape.
// Members show no Processes, and NetNS is 0 (not read).
func InspectMembers(ctx context.Context, address string) (*Group, error) {
	return inspectAddr(ctx, address, false)
}

// InspectPort lists every group on port (0: on every port) in the calling
// thread's network namespace, one per bound address, sorted by port then
// address, with the processes holding them (one scan of /proc/*/fd for
// all). Every group carries the scan's Unreadable and Note. Errors are
// *net.OpError with Op "inspect".
func InspectPort(ctx context.Context, port uint16) ([]*Group, error) {
	var ns uint64
	gs, err := inspect(ctx, port, func(a netip.AddrPort) (netip.AddrPort, bool) { return a, true }, true, &ns)
	if err != nil {
		var addr net.Addr
		if port != 0 {
			addr = &net.TCPAddr{Port: int(port)}
		}
		return nil, neterr.Op("inspect", "tcp", addr, err)
	}
	return gs, nil
}

// inspectAddr reads the group bound to address; full adds the namespace and
// the holders.
func inspectAddr(ctx context.Context, address string, full bool) (*Group, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, neterr.Op("inspect", "tcp", nil, err)
	}
	g, err := inspectOne(ctx, ap, func(a netip.AddrPort) bool { return a.Addr().Unmap() == ap.Addr().Unmap() }, full)
	if err != nil {
		return nil, neterr.Op("inspect", "tcp", net.TCPAddrFromAddrPort(ap), err)
	}
	return g, nil
}

// inspectOne gathers the listeners on ap's port that match into one group
// for ap (an empty one when none does).
func inspectOne(ctx context.Context, ap netip.AddrPort, match func(netip.AddrPort) bool, full bool) (*Group, error) {
	if ap.Port() == 0 {
		return nil, ErrPortZero
	}
	var ns uint64
	gs, err := inspect(ctx, ap.Port(), func(a netip.AddrPort) (netip.AddrPort, bool) { return ap, match(a) }, full, &ns)
	if err != nil {
		return nil, err
	}
	if len(gs) == 0 {
		return &Group{Addr: ap, NetNS: ns}, nil
	}
	return gs[0], nil
}

// inspect is the one group builder: it dumps the listeners on port and puts
// each in the group that key names (none when key says false). With full it
// also reads the namespace (into *ns as well) and scans /proc for the
// processes holding them.
func inspect(ctx context.Context, port uint16, key func(netip.AddrPort) (netip.AddrPort, bool), full bool, ns *uint64) ([]*Group, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if full {
		var err error
		if *ns, err = sockdiag.NetNS(); err != nil {
			return nil, err
		}
	}
	ls, err := sockdiag.Listeners(port)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gs := build(*ns, ls, key)
	if !full {
		return gs, nil
	}
	if err := scanHolders(ctx, gs); err != nil {
		return nil, err
	}
	return gs, nil
}

// scanHolders fills the processes holding the members of gs from one scan
// of /proc/*/fd.
func scanHolders(ctx context.Context, gs []*Group) error {
	var inodes []uint64
	for _, g := range gs {
		for _, m := range g.Members {
			inodes = append(inodes, m.Inode)
		}
	}
	if len(inodes) == 0 {
		return nil
	}
	owners, unreadable, err := sockdiag.Owners(inodes)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	addHolders(gs, owners, unreadable)
	return nil
}

// build groups listeners by key, groups sorted by port then address, members
// by inode.
func build(ns uint64, ls []sockdiag.Listener, key func(netip.AddrPort) (netip.AddrPort, bool)) []*Group {
	var gs []*Group
	var byAddr map[netip.AddrPort]*Group // past a few groups (doctor's every port)
	find := func(k netip.AddrPort) *Group {
		if byAddr != nil {
			return byAddr[k]
		}
		for _, g := range gs {
			if g.Addr == k {
				return g
			}
		}
		return nil
	}
	for i, l := range ls {
		k, ok := key(l.Addr)
		if !ok {
			continue
		}
		g := find(k)
		if g == nil {
			g = &Group{Addr: k, NetNS: ns, Members: make([]Member, 0, min(len(ls)-i, 8))}
			gs = append(gs, g)
			if byAddr == nil && len(gs) > 8 {
				byAddr = make(map[netip.AddrPort]*Group, 2*len(gs))
				for _, g := range gs {
					byAddr[g.Addr] = g
				}
			} else if byAddr != nil {
				byAddr[k] = g
			}
		}
		g.Members = append(g.Members, Member{Addr: l.Addr, Inode: l.Inode, UID: l.UID, Queue: l.Queue, Backlog: l.Backlog, Cookie: l.Cookie, CPU: CPUUnknown})
	}
	for _, g := range gs {
		slices.SortFunc(g.Members, func(a, b Member) int { return cmp.Compare(a.Inode, b.Inode) })
	}
	slices.SortFunc(gs, func(a, b *Group) int {
		return cmp.Or(cmp.Compare(a.Addr.Port(), b.Addr.Port()), cmp.Compare(a.Addr.Addr().String(), b.Addr.Addr().String()))
	})
	return gs
}

// addHolders fills the members' processes from one holder scan.
func addHolders(gs []*Group, owners map[uint64][]sockdiag.Process, unreadable []int) {
	var note string
	if len(unreadable) > 0 {
		note = fmt.Sprintf("could not read the fds of %d processes (%s): their sockets show no PID; another user's processes need root or CAP_SYS_PTRACE", len(unreadable), shortList(unreadable))
	}
	for _, g := range gs {
		for i := range g.Members {
			for _, p := range owners[g.Members[i].Inode] {
				g.Members[i].Processes = append(g.Members[i].Processes, Process{PID: p.PID, Comm: p.Comm, UID: p.UID})
			}
		}
		g.Unreadable, g.Note = unreadable, note
	}
}

func shortList(pids []int) string {
	if len(pids) <= 5 {
		return fmt.Sprintf("pids %v", pids)
	}
	return fmt.Sprintf("pids %v and %d more", pids[:5], len(pids)-5)
}
