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

// ReadCounters takes a snapshot. It keeps only the six counters and the
// parser reuses its buffer, so that a metrics scrape (stats.ReadKernel)
// allocates little. A counter the kernel lacks (TcpExt.TCPMigrateReq* before
// Linux 5.14) reads 0.
func ReadCounters() (Counters, error) {
	var c Counters
	if err := linux.ScanSNMP(c.set); err != nil {
		return Counters{}, err
	}
	return c, nil
}

// set stores one counter of the kernel's files if c holds it.
func (c *Counters) set(group, name []byte, v uint64) {
	if p := c.field(group, name); p != nil {
		*p = v
	}
}

// field is the one list of the counters Counters holds, by group and name.
func (c *Counters) field(group, name []byte) *uint64 {
	switch string(group) {
	case "TcpExt":
		switch string(name) {
		case "TCPMigrateReqSuccess":
			return &c.MigrateReqSuccess
		case "TCPMigrateReqFailure":
			return &c.MigrateReqFailure
		case "ListenOverflows":
			return &c.ListenOverflows
		case "ListenDrops":
			return &c.ListenDrops
		}
	case "Tcp":
		switch string(name) {
		case "OutRsts":
			return &c.OutRsts
		case "EstabResets":
			return &c.EstabResets
		}
	}
	return nil
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
