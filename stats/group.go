package stats

import (
	"context"

	"github.com/zerodrop/zerodrop/reuseport"
)

// Group summarizes a reuseport.Group in the figures a metrics system
// exports: how many members, how much is queued, the backlogs, the owners.
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

// ReadGroup reads the group bound to address ("ip:port", a literal IP) in the
// calling thread's network namespace through reuseport.InspectMembers (no
// /proc scan). No group is Members == 0, not an error. Errors are
// *net.OpError with Op "inspect" (reuseport.ErrPortZero for port 0). It
// needs no capability; Linux 3.3.
func ReadGroup(ctx context.Context, address string) (Group, error) {
	g := Group{Addr: address}
	rg, err := reuseport.InspectMembers(ctx, address)
	if err != nil {
		return g, err
	}
	uids := map[uint32]bool{}
	for _, m := range rg.Members {
		g.Members++
		g.Queue += uint64(m.Queue)
		g.MaxQueue = max(g.MaxQueue, uint64(m.Queue))
		g.Backlog += uint64(m.Backlog)
		uids[m.UID] = true
	}
	g.UIDs = len(uids)
	return g, nil
}
