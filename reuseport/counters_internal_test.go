package reuseport

import "testing"

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
		if err := parseCounters([]byte(bad), &Counters{}); err == nil {
			t.Errorf("parseCounters(%q): no error", bad)
		}
	}
}
