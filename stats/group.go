package stats

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

// Group is what the kernel shows of one reuseport group: the TCP listeners
// bound exactly to Addr, as zerodrop doctor reads them (NETLINK_SOCK_DIAG),
// without the processes holding them.
type Group struct {
	Addr    string `json:"addr"`
	Members int    `json:"members"`
	// Queue is the connections waiting in the members' accept queues, summed;
	// MaxQueue the longest of them.
	Queue    uint64 `json:"queue"`
	MaxQueue uint64 `json:"max_queue"`
	// Backlog is the members' listen backlogs, summed.
	Backlog uint64 `json:"backlog"`
	// UIDs is the number of distinct socket owners (more than 1: the group
	// cannot be joined by everyone, see reuseport.UIDMismatchError).
	UIDs int `json:"uids"`
}

// errPortZero is returned for an address with port 0, which names no group.
var errPortZero = errors.New("port 0 names no group")

// ReadGroup reads the group bound to address ("ip:port", a literal IP) in the
// calling thread's network namespace. No group is Members == 0, not an error.
// Errors are *net.OpError with Op "inspect". It needs no capability; Linux 3.3.
func ReadGroup(ctx context.Context, address string) (Group, error) {
	g := Group{Addr: address}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return g, &net.OpError{Op: "inspect", Net: "tcp", Err: err}
	}
	opErr := func(err error) error {
		return &net.OpError{Op: "inspect", Net: "tcp", Addr: net.TCPAddrFromAddrPort(ap), Err: err}
	}
	if ap.Port() == 0 {
		return g, opErr(errPortZero)
	}
	if err := ctx.Err(); err != nil {
		return g, opErr(err)
	}
	ls, err := sockdiag.Listeners(ap.Port())
	if err != nil {
		return g, opErr(err)
	}
	uids := map[uint32]bool{}
	for _, l := range ls {
		if l.Addr.Addr().Unmap() != ap.Addr().Unmap() {
			continue
		}
		g.Members++
		g.Queue += uint64(l.Queue)
		g.MaxQueue = max(g.MaxQueue, uint64(l.Queue))
		g.Backlog += uint64(l.Backlog)
		uids[l.UID] = true
	}
	g.UIDs = len(uids)
	return g, nil
}
