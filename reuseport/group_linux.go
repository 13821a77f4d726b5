package reuseport

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

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
	Backlog uint32         `json:"backlog"` // listen backlog
	// CPU is the member's SO_INCOMING_CPU: a CPU number, CPUNone, or
	// CPUUnknown (until Group.ReadCPUs reads it, or when no holder let it).
	CPU       int       `json:"cpu"`
	Processes []Process `json:"processes,omitempty"`
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

// Group is what the kernel shows of the listeners on one port.
type Group struct {
	NetNS   uint64   `json:"netns"` // inode of the network namespace looked at
	Members []Member `json:"members"`
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

// Inspect lists the TCP listeners bound exactly to address ("host:port", a
// literal IP) in the calling thread's network namespace, with the processes
// holding them (a best-effort scan of /proc/*/fd). Port 0 is refused. A ctx
// that has ended, before or during the scan, gives an error wrapping ctx.Err().
// Every error names address ("inspect 127.0.0.1:80: ...").
func Inspect(ctx context.Context, address string) (*Group, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", address, err)
	}
	if ap.Port() == 0 {
		return nil, fmt.Errorf("inspect %s: port 0 names no group", address)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", address, err)
	}
	g, err := inspect(ctx, ap.Port(), func(a netip.AddrPort) bool { return a.Addr().Unmap() == ap.Addr().Unmap() })
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", address, err)
	}
	return g, nil
}

// inspect lists the listeners on port that match.
func inspect(ctx context.Context, port uint16, match func(netip.AddrPort) bool) (*Group, error) {
	ns, err := sockdiag.NetNS()
	if err != nil {
		return nil, err
	}
	ls, err := sockdiag.Listeners(port)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	g := &Group{NetNS: ns}
	var inodes []uint64
	for _, l := range ls {
		if match(l.Addr) {
			g.Members = append(g.Members, Member{Addr: l.Addr, Inode: l.Inode, UID: l.UID, Queue: l.Queue, Backlog: l.Backlog, CPU: CPUUnknown})
			inodes = append(inodes, l.Inode)
		}
	}
	if len(inodes) == 0 {
		return g, nil
	}
	owners, unreadable, err := sockdiag.Owners(inodes)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range g.Members {
		for _, p := range owners[g.Members[i].Inode] {
			g.Members[i].Processes = append(g.Members[i].Processes, Process{PID: p.PID, Comm: p.Comm, UID: p.UID})
		}
	}
	g.Unreadable = unreadable
	if len(unreadable) > 0 {
		g.Note = fmt.Sprintf("could not read the fds of %d processes (%s): their sockets show no PID; another user's processes need root or CAP_SYS_PTRACE", len(unreadable), shortList(unreadable))
	}
	return g, nil
}

func shortList(pids []int) string {
	if len(pids) <= 5 {
		return fmt.Sprintf("pids %v", pids)
	}
	return fmt.Sprintf("pids %v and %d more", pids[:5], len(pids)-5)
}
