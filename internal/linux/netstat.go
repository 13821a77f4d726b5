package linux

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// SNMP holds the counters of /proc/net/netstat and /proc/net/snmp, keyed by
// "Group.Name", for example "TcpExt.TCPMigrateReqSuccess" or "Tcp.OutRsts".
type SNMP map[string]uint64

// ReadSNMP reads /proc/thread-self/net/netstat and /proc/thread-self/net/snmp of
// the calling thread's network namespace.
func ReadSNMP() (SNMP, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out := make(SNMP, 256)
	for _, f := range []string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read counters: %w", err)
		}
		if err := parseSNMP(b, out); err != nil {
			return nil, fmt.Errorf("read counters: %s: %w", f, err)
		}
	}
	return out, nil
}

// parseSNMP parses the /proc/net SNMP files into out (see EachCounter).
func parseSNMP(b []byte, out SNMP) error {
	return EachCounter(b, func(group, name []byte, v uint64) {
		out[string(group)+"."+string(name)] = v
	})
}

// EachCounter parses the "Group: names" / "Group: values" line pairs of
// /proc/net/netstat or /proc/net/snmp and calls fn for every counter, with
// group and name valid only during the call. It is the module's one parser of
// these files. Negative values (Tcp.MaxConn is -1) are skipped; a blank line,
// a header without values or lines that do not pair give an error.
func EachCounter(b []byte, fn func(group, name []byte, v uint64)) error {
	for len(b) > 0 {
		var names, values []byte
		var ok bool
		names, b, _ = bytes.Cut(b, []byte{'\n'})
		if len(bytes.TrimSpace(names)) == 0 {
			return fmt.Errorf("blank line where a counter header belongs")
		}
		group, names, _ := bytes.Cut(names, []byte{':'})
		if values, b, ok = bytes.Cut(b, []byte{'\n'}); !ok && len(values) == 0 {
			return fmt.Errorf("header %q without values", group)
		}
		vgroup, values, _ := bytes.Cut(values, []byte{':'})
		if !bytes.Equal(group, vgroup) {
			return fmt.Errorf("malformed counter lines %q", group)
		}
		for {
			var name, value []byte
			name, names = field(names)
			value, values = field(values)
			if name == nil && value == nil {
				break
			}
			if name == nil || value == nil {
				return fmt.Errorf("malformed counter lines %q", group)
			}
			if v, err := strconv.ParseUint(string(value), 10, 64); err == nil {
				fn(group, name, v)
			}
		}
	}
	return nil
}

// field returns the first space-separated field of b and the rest.
func field(b []byte) (f, rest []byte) {
	b = bytes.TrimLeft(b, " ")
	if len(b) == 0 {
		return nil, nil
	}
	f, rest, _ = bytes.Cut(b, []byte{' '})
	return f, rest
}
