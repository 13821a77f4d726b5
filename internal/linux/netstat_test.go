package linux

import "testing"

func TestParseSNMP(t *testing.T) {
	in := "TcpExt: SyncookiesSent TCPMigrateReqSuccess\nTcpExt: 3 20\nTcp: RtoAlgorithm MaxConn OutRsts\nTcp: 1 -1 7\n"
	out := SNMP{}
	if err := parseSNMP([]byte(in), out); err != nil {
		t.Fatal(err)
	}
	want := SNMP{"TcpExt.SyncookiesSent": 3, "TcpExt.TCPMigrateReqSuccess": 20, "Tcp.RtoAlgorithm": 1, "Tcp.OutRsts": 7}
	if len(out) != len(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("%s = %d, want %d", k, out[k], v)
		}
	}
	if err := parseSNMP([]byte("TcpExt: a b\nTcpExt: 1\n"), SNMP{}); err == nil {
		t.Error("mismatched lines: no error")
	}
}

func TestReadSNMPHasCounters(t *testing.T) {
	s, err := ReadSNMP()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"TcpExt.TCPMigrateReqSuccess", "TcpExt.TCPMigrateReqFailure", "TcpExt.ListenOverflows", "TcpExt.ListenDrops", "Tcp.OutRsts", "Tcp.EstabResets"} {
		if _, ok := s[k]; !ok {
			t.Errorf("counter %s missing", k)
		}
	}
}

// A blank line (or a header without values) is an error, never a panic.
func TestParseSNMPBlankLine(t *testing.T) {
	for _, in := range []string{"\n", "TcpExt: a b\nTcpExt: 1 2\n\n", "\nTcp: 1\n", "TcpExt: a"} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("parseSNMP(%q) panicked: %v", in, r)
				}
			}()
			if err := parseSNMP([]byte(in), SNMP{}); err == nil {
				t.Errorf("parseSNMP(%q): no error", in)
			}
		}()
	}
}
