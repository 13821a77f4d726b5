package linux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"
)

// SNMP holds the counters of /proc/net/netstat and /proc/net/snmp, keyed by
// "Group.Name", for example "TcpExt.TCPMigrateReqSuccess" or "Tcp.OutRsts".
type SNMP map[string]uint64

// snmpFiles are the counter files of the calling thread's network namespace.
var snmpFiles = [...]string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"}

// SNMPFormatError is the error of a counter file that is not "Group: names" /
// "Group: values" line pairs: a blank line where a header belongs, a header
// without its values line, or a values line whose group or number of fields
// differs from its header's.
type SNMPFormatError struct {
	File   string // the file; "" when EachCounter parsed bytes
	Line   int    // 1-based line of the header of the faulty pair
	Reason string
}

func (e *SNMPFormatError) Error() string {
	s := fmt.Sprintf("line %d: %s", e.Line, e.Reason)
	if e.File != "" {
		s = e.File + ": " + s
	}
	return s
}

// ReadSNMP reads /proc/thread-self/net/netstat and /proc/thread-self/net/snmp of
// the calling thread's network namespace.
func ReadSNMP() (SNMP, error) {
	out := make(SNMP, 256)
	if err := ScanSNMP(func(group, name []byte, v uint64) {
		out[string(group)+"."+string(name)] = v
	}); err != nil {
		return nil, err
	}
	return out, nil
}

var snmpBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// ScanSNMP reads the files ReadSNMP reads into a reused buffer and calls fn for
// every counter (see EachCounter), so that a caller keeping a few counters (a
// metrics scrape) allocates little. A malformed file gives an error wrapping a
// *SNMPFormatError that names it; fn may have been called for the lines before.
func ScanSNMP(fn func(group, name []byte, v uint64)) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bp := snmpBufs.Get().(*[]byte)
	defer snmpBufs.Put(bp)
	for _, f := range snmpFiles {
		b, err := readInto(f, (*bp)[:0])
		*bp = b
		if err != nil {
			return fmt.Errorf("read counters: %w", err)
		}
		if err := EachCounter(b, fn); err != nil {
			var fe *SNMPFormatError
			if errors.As(err, &fe) {
				fe.File = f
			}
			return fmt.Errorf("read counters: %w", err)
		}
	}
	return nil
}

// readInto appends the contents of the file name to b.
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

// EachCounter parses the "Group: names" / "Group: values" line pairs of
// /proc/net/netstat or /proc/net/snmp and calls fn for every counter, with
// group and name valid only during the call. It is the module's one parser of
// these files. Negative values (Tcp.MaxConn is -1) are skipped; a blank line,
// a header without values or lines that do not pair give a *SNMPFormatError.
func EachCounter(b []byte, fn func(group, name []byte, v uint64)) error {
	for line := 1; len(b) > 0; line += 2 {
		var names, values []byte
		var ok bool
		names, b, _ = bytes.Cut(b, []byte{'\n'})
		if len(bytes.TrimSpace(names)) == 0 {
			return &SNMPFormatError{Line: line, Reason: "blank line where a counter header belongs"}
		}
		group, names, ok := bytes.Cut(names, []byte{':'})
		if !ok {
			return &SNMPFormatError{Line: line, Reason: fmt.Sprintf("header %q without a colon", group)}
		}
		if values, b, ok = bytes.Cut(b, []byte{'\n'}); !ok && len(values) == 0 {
			return &SNMPFormatError{Line: line, Reason: fmt.Sprintf("header %q without values", group)}
		}
		vgroup, values, _ := bytes.Cut(values, []byte{':'})
		if !bytes.Equal(group, vgroup) {
			return &SNMPFormatError{Line: line, Reason: fmt.Sprintf("header %q followed by values of %q", group, vgroup)}
		}
		if nn, nv := countFields(names), countFields(values); nn != nv {
			return &SNMPFormatError{Line: line, Reason: fmt.Sprintf("%s: %d names, %d values", group, nn, nv)}
		}
		for {
			var name, value []byte
			name, names = field(names)
			value, values = field(values)
			if name == nil {
				break
			}
			if value[0] == '-' {
				continue // negative: skipped without the cost of a ParseUint error
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

// countFields counts the space-separated fields of b.
func countFields(b []byte) int {
	n := 0
	for f, rest := field(b); f != nil; f, rest = field(rest) {
		n++
	}
	return n
}
