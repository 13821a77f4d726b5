package netnstest

import (
	"testing"

	"github.com/zerodrop/zerodrop/internal/linux"
)

// Counters is a snapshot of the namespace's SNMP counters (TcpExt and Tcp).
type Counters struct{ before linux.SNMP }

// Snapshot reads the counters now.
func Snapshot(tb testing.TB) *Counters {
	tb.Helper()
	s, err := linux.ReadSNMP()
	if err != nil {
		tb.Fatal(err)
	}
	return &Counters{before: s}
}

// Delta reads the counters again and returns after-before for each key, e.g.
// "TcpExt.TCPMigrateReqSuccess" or "Tcp.OutRsts".
func (c *Counters) Delta(tb testing.TB, keys ...string) map[string]int64 {
	tb.Helper()
	now, err := linux.ReadSNMP()
	if err != nil {
		tb.Fatal(err)
	}
	d := make(map[string]int64, len(keys))
	for _, k := range keys {
		if _, ok := now[k]; !ok {
			tb.Fatalf("counter %s not found", k)
		}
		d[k] = int64(now[k]) - int64(c.before[k])
	}
	return d
}
