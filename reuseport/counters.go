package reuseport

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/zerodrop/zerodrop/internal/linux"
)

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

// ReadCounters takes a snapshot. It parses only the six counters it keeps and
// reuses its buffer, so that a metrics scrape (stats.ReadKernel) allocates little.
func ReadCounters() (Counters, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var c Counters
	for _, f := range [...]string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
		b, err := readInto(f, (*bp)[:0])
		*bp = b
		if err != nil {
			return Counters{}, fmt.Errorf("read counters: %w", err)
		}
		if err := parseCounters(b, &c); err != nil {
			return Counters{}, fmt.Errorf("read counters: %s: %w", f, err)
		}
	}
	return c, nil
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func readInto(name string, b []byte) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return b, err
	}
	defer f.Close()
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// parseCounters sets the counters c holds from one /proc/net SNMP file.
func parseCounters(b []byte, c *Counters) error {
	return linux.EachCounter(b, func(group, name []byte, v uint64) {
		if p := c.field(group, name); p != nil {
			*p = v
		}
	})
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
