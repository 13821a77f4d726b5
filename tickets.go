package zerodrop

import (
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
)

// The session-ticket keys across a systemd restart (stop, then start: no
// predecessor to hand them to). The serving generation keeps them in the
// service's fd store as the sealed memfd of ticket.Keys.Export, named
// ticket.FDName, replaced at each Ready and at a stop that is not a
// handoff (a rotation may have happened meanwhile); the next start finds it
// among its activated fds (systemd.Activation.Tickets) and imports it. The
// keys are never written to a file: systemd holds the memfd, anonymous
// memory, as it holds a stored socket.

// restoreTickets imports the keys systemd passed back from the fd store into
// Config.Handoff.TicketKeys, when this generation has no predecessor (one that had
// hands its keys over, newer than the store's). A memfd that does not import
// is logged and the keys stay fresh: clients do a full handshake, as without
// the store. Without TicketKeys, a stored memfd is dropped from the store.
func (g *Generation) restoreTickets() {
	a := g.table.Activation() // nil with a predecessor: its keys came with the sockets
	if a == nil {
		return
	}
	f, ok := a.Tickets()
	if !ok {
		return
	}
	defer f.Close()
	keys := g.cfg.Handoff.TicketKeys
	switch {
	case keys == nil:
		n := systemd.FromEnv()
		if n == nil {
			return
		}
		if err := n.Remove(ticket.FDName); err != nil {
			g.log.Warn("stored session-ticket keys not removed", zap.String("event", "zerodrop.tickets_not_removed"), zap.Error(err))
		}
	case g.Number() > 1:
	default:
		if err := keys.Import(f); err != nil {
			g.log.Warn("stored session-ticket keys refused; fresh keys", zap.String("event", "zerodrop.tickets_refused"), zap.Error(err))
			return
		}
		g.log.Info("session-ticket keys from the fd store", zap.String("event", "zerodrop.tickets_restored"), zap.Int("keys", keys.Len()))
	}
}

// storeTickets puts the keys of Config.Handoff.TicketKeys, as a sealed memfd, in
// systemd's fd store, in place of those stored before (FDSTOREREMOVE=1, then
// FDSTORE=1: each Export is a new file, which systemd would keep beside the
// old one). Outside systemd, or without TicketKeys, it does nothing; a
// failure is logged (the service serves on; its next start draws fresh keys).
func (g *Generation) storeTickets() {
	n, keys := systemd.FromEnv(), g.cfg.Handoff.TicketKeys
	if n == nil || keys == nil {
		return
	}
	f, err := keys.Export()
	if err == nil {
		defer f.Close()
		if err = n.Remove(ticket.FDName); err == nil {
			err = n.Store(ticket.FDName, f)
		}
	}
	if err != nil {
		g.log.Warn("session-ticket keys not stored", zap.String("event", "zerodrop.tickets_not_stored"), zap.Error(err))
	}
}
