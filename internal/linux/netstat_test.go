package linux

import (
	"errors"
	"strings"
	"testing"
)

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

// Lines that are not header/value pairs are a *SNMPFormatError naming the line
// of the pair, never a panic and never counters read under the wrong names.
func TestParseSNMPMalformed(t *testing.T) {
	for _, c := range []struct{ in, reason string }{
		{"\n", "line 1: blank line"},
		{"TcpExt: a b\nTcpExt: 1 2\n\n", "line 3: blank line"},
		{"TcpExt: a b\n\nTcpExt: 1 2\n", `line 1: header "TcpExt" followed by values of ""`},
		{"TcpExt: a", `line 1: header "TcpExt" without values`},
		{"TcpExt: a\n", `line 1: header "TcpExt" without values`},
		{"TcpExt: a b\nTcpExt: 1\n", "line 1: TcpExt: 2 names, 1 values"},
		{"TcpExt: a\nTcpExt: 1 2\n", "line 1: TcpExt: 1 names, 2 values"},
		{"Tcp: a\nTcp: 1\nTcpExt: ListenDrops\nTcp: 2\n", `line 3: header "TcpExt" followed by values of "Tcp"`},
		{"TcpExt a\nTcpExt 1\n", `line 1: header "TcpExt a" without a colon`},
	} {
		err := parseSNMP([]byte(c.in), SNMP{})
		var fe *SNMPFormatError
		if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), c.reason) {
			t.Errorf("parseSNMP(%q) = %v, want a *SNMPFormatError %q", c.in, err, c.reason)
		}
	}
	err := error(&SNMPFormatError{File: "/proc/thread-self/net/snmp", Line: 3, Reason: "blank line where a counter header belongs"})
	if got, want := err.Error(), "/proc/thread-self/net/snmp: line 3: blank line where a counter header belongs"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

// parseSNMP parses the /proc/net SNMP files into out as ReadSNMP does.
func parseSNMP(b []byte, out SNMP) error {
	return EachCounter(b, func(group, name []byte, v uint64) {
		out[string(group)+"."+string(name)] = v
	})
}
