package reuseport

import (
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// parseCounters parses one counter file as ReadCounters does.
func parseCounters(b []byte, c *Counters) error { return linux.EachCounter(b, c.set) }

// parseCounters keeps the six counters of Counters and refuses what is not a
// pair of counter lines (stats' former copy of the parser read it as zeros).
func TestParseCounters(t *testing.T) {
	in := "TcpExt: SyncookiesSent ListenOverflows ListenDrops TCPMigrateReqSuccess TCPMigrateReqFailure\n" +
		"TcpExt: 1 2 3 4 5\n" +
		"IpExt: ListenDrops OutRsts\n" +
		"IpExt: 99 99\n" +
		"Tcp: RtoAlgorithm MaxConn EstabResets OutRsts\n" +
		"Tcp: 1 -1 7 8\n"
	var c Counters
	if err := parseCounters([]byte(in), &c); err != nil {
		t.Fatal(err)
	}
	want := Counters{ListenOverflows: 2, ListenDrops: 3, MigrateReqSuccess: 4, MigrateReqFailure: 5, EstabResets: 7, OutRsts: 8}
	if c != want {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	for _, bad := range []string{"TcpExt: ListenDrops\n", "TcpExt: ListenDrops\nTcp: 3\n", "TcpExt: ListenDrops\nTcpExt: 3 4\n", "\n"} {
		var fe *linux.SNMPFormatError
		if err := parseCounters([]byte(bad), &Counters{}); !errors.As(err, &fe) {
			t.Errorf("parseCounters(%q): %v, want a *linux.SNMPFormatError", bad, err)
		}
	}
}

// ReadCounters reads what linux.ReadSNMP reads, and every field of Counters is
// named by a counter the kernel has (a misspelt name in field would read 0 for
// ever): given every counter of the kernel's files as a distinct non-zero
// value, set fills each field. A fresh namespace without traffic keeps the
// counters still between the reads.
func TestReadCountersAgrees(t *testing.T) {
	netnstest.Run(t, netnstest.Options{}, func(t *testing.T) {
		// A dial refused by a port nobody listens on moves Tcp.OutRsts.
		var d net.Dialer
		if c, err := d.DialContext(t.Context(), "tcp4", "127.0.0.1:1"); err == nil {
			c.Close()
			t.Fatal("dial to 127.0.0.1:1 connected")
		}
		got, err := ReadCounters()
		if err != nil {
			t.Fatal(err)
		}
		s, err := linux.ReadSNMP()
		if err != nil {
			t.Fatal(err)
		}
		var want, named Counters
		i := uint64(0)
		for k, v := range s {
			group, name, _ := strings.Cut(k, ".")
			want.set([]byte(group), []byte(name), v)
			i++
			named.set([]byte(group), []byte(name), i)
		}
		if got != want || got.OutRsts == 0 {
			t.Errorf("ReadCounters %+v, from ReadSNMP %+v; want equal with OutRsts > 0", got, want)
		}
		nv := reflect.ValueOf(named)
		for f := range nv.NumField() {
			if nv.Field(f).Uint() == 0 {
				t.Errorf("Counters.%s: no counter of the kernel's files sets it", nv.Type().Field(f).Name)
			}
		}
	})
}
