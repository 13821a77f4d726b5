package reuseport

import "github.com/zerodrop/zerodrop/internal/linux"

// Counters are the kernel counters that tell what happened to accept queues, from
// /proc/net/netstat (TcpExt) and /proc/net/snmp (Tcp) of the calling thread's
// network namespace. They are namespace-wide: every listener there moves them.
type Counters struct {
	MigrateReqSuccess uint64 `json:"migrate_req_success"` // TcpExt.TCPMigrateReqSuccess
	MigrateReqFailure uint64 `json:"migrate_req_failure"` // TcpExt.TCPMigrateReqFailure
	ListenOverflows   uint64 `json:"listen_overflows"`    // TcpExt.ListenOverflows
	ListenDrops       uint64 `json:"listen_drops"`        // TcpExt.ListenDrops
	// OutRsts and EstabResets are the only trace of a queue reset while
	// migration is off: TcpExt stays silent then.
	OutRsts     uint64 `json:"out_rsts"`     // Tcp.OutRsts
	EstabResets uint64 `json:"estab_resets"` // Tcp.EstabResets
}

// ReadCounters takes a snapshot.
func ReadCounters() (Counters, error) {
	s, err := linux.ReadSNMP()
	if err != nil {
		return Counters{}, err
	}
	return Counters{
		MigrateReqSuccess: s["TcpExt.TCPMigrateReqSuccess"],
		MigrateReqFailure: s["TcpExt.TCPMigrateReqFailure"],
		ListenOverflows:   s["TcpExt.ListenOverflows"],
		ListenDrops:       s["TcpExt.ListenDrops"],
		OutRsts:           s["Tcp.OutRsts"],
		EstabResets:       s["Tcp.EstabResets"],
	}, nil
}

// Sub returns c - old, field by field: the delta between two snapshots.
func (c Counters) Sub(old Counters) Counters {
	return Counters{
		MigrateReqSuccess: c.MigrateReqSuccess - old.MigrateReqSuccess,
		MigrateReqFailure: c.MigrateReqFailure - old.MigrateReqFailure,
		ListenOverflows:   c.ListenOverflows - old.ListenOverflows,
		ListenDrops:       c.ListenDrops - old.ListenDrops,
		OutRsts:           c.OutRsts - old.OutRsts,
		EstabResets:       c.EstabResets - old.EstabResets,
	}
}
