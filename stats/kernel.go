package stats

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/zerodrop/zerodrop/reuseport"
)

// ReadKernel reads the kernel counters and net.ipv4.tcp_migrate_req of the
// calling thread's network namespace. It gives the figures of
// reuseport.ReadCounters, parsing only the six counters it needs, so that a
// metrics scrape allocates little.
func ReadKernel() Kernel {
	var k Kernel
	c, err := readCounters()
	if err != nil {
		k.Err = err.Error()
	}
	k.Counters = c
	if on, err := reuseport.MigrationEnabled(); err == nil {
		k.MigrateReq = &on
	}
	return k
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// readCounters reads /proc/thread-self/net/netstat and snmp.
func readCounters() (reuseport.Counters, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var c reuseport.Counters
	for _, f := range [...]string{"/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"} {
		b, err := readInto(f, (*bp)[:0])
		*bp = b
		if err != nil {
			return reuseport.Counters{}, fmt.Errorf("read counters: %w", err)
		}
		parseCounters(b, &c)
	}
	return c, nil
}

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

// parseCounters scans the "Group: names" / "Group: values" line pairs and
// sets the counters c holds.
func parseCounters(b []byte, c *reuseport.Counters) {
	for len(b) > 0 {
		var names, values []byte
		names, b, _ = bytes.Cut(b, []byte{'\n'})
		values, b, _ = bytes.Cut(b, []byte{'\n'})
		group, names, _ := bytes.Cut(names, []byte{':'})
		_, values, _ = bytes.Cut(values, []byte{':'})
		for {
			var name, value []byte
			name, names = field(names)
			value, values = field(values)
			if name == nil || value == nil {
				break
			}
			if p := counterField(c, group, name); p != nil {
				*p, _ = strconv.ParseUint(string(value), 10, 64)
			}
		}
	}
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

func counterField(c *reuseport.Counters, group, name []byte) *uint64 {
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
