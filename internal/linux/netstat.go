package linux

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
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

// parseSNMP parses the "Group: names" / "Group: values" line pairs of the
// /proc/net SNMP files into out. Negative values (Tcp.MaxConn is -1) are skipped.
func parseSNMP(b []byte, out SNMP) error {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		names := strings.Fields(sc.Text())
		if len(names) == 0 {
			return fmt.Errorf("blank line where a counter header belongs")
		}
		if !sc.Scan() {
			return fmt.Errorf("header %q without values", names[0])
		}
		values := strings.Fields(sc.Text())
		if len(names) != len(values) || names[0] != values[0] {
			return fmt.Errorf("malformed counter lines %q", names[0])
		}
		group := strings.TrimSuffix(names[0], ":")
		for i := 1; i < len(names); i++ {
			v, err := strconv.ParseUint(values[i], 10, 64)
			if err != nil {
				continue
			}
			out[group+"."+names[i]] = v
		}
	}
	return sc.Err()
}
