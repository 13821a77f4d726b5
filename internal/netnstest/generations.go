package netnstest

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ExpectPID waits (as Expect) for a line starting with prefix that ends in
// " pid P" and returns P.
func (s *Subreaped) ExpectPID(tb testing.TB, prefix string) int {
	tb.Helper()
	line := s.Expect(tb, prefix)
	_, p, _ := strings.Cut(line, " pid ")
	pid, err := strconv.Atoi(p)
	if err != nil {
		tb.Fatalf("no pid at the end of %q", line)
	}
	return pid
}

// Upgrade sends SIGHUP to the last of pids, the generations so far, waits
// for the line of its successor starting with serving (and ending in " pid
// P") and for the line starting with stopped, and returns pids and P.
func (s *Subreaped) Upgrade(tb testing.TB, pids []int, serving, stopped string) []int {
	tb.Helper()
	if err := syscall.Kill(pids[len(pids)-1], syscall.SIGHUP); err != nil {
		tb.Fatal(err)
	}
	pids = append(pids, s.ExpectPID(tb, serving))
	s.Expect(tb, stopped)
	return pids
}

// WaitCount waits up to 60 s until count() reaches n, and fails tb if it
// does not; what names the count in the failure.
func WaitCount(tb testing.TB, what string, n int, count func() int) {
	tb.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := count()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: %d in 60 s, want %d", what, got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StopLast ends a chain of generations, pids in order: it checks that each
// one but the last has exited 0 (reaped within 60 s) and that the last is
// the only process running Bin; it then sends the last SIGTERM, waits for a
// line starting with stopped, checks that it exits 0 within 60 s, and
// returns that line.
func (s *Subreaped) StopLast(tb testing.TB, pids []int, stopped string) string {
	tb.Helper()
	for _, pid := range pids[:len(pids)-1] {
		if ws := s.Reap(tb, pid, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			tb.Errorf("old generation pid %d: %v, want exit 0", pid, ws)
		}
	}
	last := pids[len(pids)-1]
	if got := s.Running(); len(got) != 1 || got[0] != last {
		tb.Errorf("server processes %v, want only the last generation's %d", got, last)
	}
	if err := syscall.Kill(last, syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	line := s.Expect(tb, stopped)
	if ws := s.Reap(tb, last, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
		tb.Errorf("last generation pid %d after SIGTERM: %v, want exit 0", last, ws)
	}
	return line
}

// CheckConnects logs the connection counters since the snapshot and fails
// tb on any failed connection attempt or listen queue drop
// (Tcp.AttemptFails, TcpExt.ListenOverflows, TcpExt.ListenDrops); it
// returns the counters.
func (c *Counters) CheckConnects(tb testing.TB) map[string]int64 {
	tb.Helper()
	d := c.Delta(tb, "Tcp.ActiveOpens", "Tcp.PassiveOpens", "Tcp.AttemptFails", "Tcp.EstabResets",
		"Tcp.OutRsts", "TcpExt.ListenOverflows", "TcpExt.ListenDrops")
	tb.Logf("counters: %v", d)
	if d["Tcp.AttemptFails"]+d["TcpExt.ListenOverflows"]+d["TcpExt.ListenDrops"] != 0 {
		tb.Errorf("failed connection attempts or listen drops: %v, want none", d)
	}
	return d
}
