package reuseport_test

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// onlineCPUs returns the online CPUs; the CPU tests need two or more and
// Linux 6.1. They skip without (a failure under ZERODROP_REQUIRE_PRIVILEGED=1),
// and fail when the kernel's support cannot be told.
func onlineCPUs(t *testing.T) []int {
	t.Helper()
	cpus, err := reuseport.OnlineCPUs()
	if err != nil {
		t.Fatal(err)
	}
	netnstest.SkipUnless(t, len(cpus) >= 2, fmt.Sprintf("one online CPU (%v): no CPU to prefer over another", cpus))
	netnstest.RequireSupport(t, reuseport.CPUPreference(), reuseport.ErrNoCPUPreference)
	return cpus
}

// dialFrom connects to addr from a thread pinned to cpu (the loopback SYN is
// handled on the sending CPU) and sends the CPU number as one byte.
func dialFrom(cpu int, addr string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread() // the affinity stays with the thread, which is never reused
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{byte(cpu)}); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 1))
	return err
}

// landing is which listener (by index) accepted a connection from which CPU.
type landing struct{ listener, from int }

// serveCPUs accepts on every listener until it is closed, reads the client's
// CPU byte, answers it, and sends a landing per connection.
func serveCPUs(ls []*reuseport.Listener, out chan<- landing) func() {
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 1)
				if _, err := c.Read(b); err == nil {
					out <- landing{listener: i, from: int(b[0])}
					c.Write(b)
				}
				c.Close()
			}
		}()
	}
	return wg.Wait
}

// E12 of KERNEL.md as a test: with two listeners per CPU (ListenPerCPU twice)
// and one that never sets SO_INCOMING_CPU, every connection from a client
// pinned to a CPU lands on a listener of that CPU, and the unset one gets
// none. Inspect shows each member's CPU and that every CPU is covered.
func TestPinnedClients(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cpus := onlineCPUs(t)
		var cfg reuseport.Config
		first, err := cfg.ListenPerCPU(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := first[0].Addr().String()
		second, err := cfg.ListenPerCPU(ctx, "tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		unset := listen(t, &cfg, addr)
		ls := append(append(slices.Clone(first), second...), unset)
		for _, l := range ls {
			t.Cleanup(func() { l.Close() })
		}
		cpuOf := func(i int) int {
			if i == len(ls)-1 {
				return reuseport.CPUNone
			}
			return cpus[i%len(cpus)]
		}
		for i, l := range ls {
			if got, err := reuseport.ReadIncomingCPU(l); err != nil || got != cpuOf(i) {
				t.Fatalf("listener %d: SO_INCOMING_CPU reads %d, %v; want %d", i, got, err, cpuOf(i))
			}
		}
		g, err := reuseport.Inspect(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		g.ReadCPUs()
		if len(g.Members) != len(ls) || !g.PrefersCPU() || g.Uncovered(cpus) != nil {
			t.Fatalf("group %+v: want %d members covering %v", g.Members, len(ls), cpus)
		}
		want := map[int]int{} // CPU: members
		for i := range ls {
			want[cpuOf(i)]++
		}
		for _, m := range g.Members {
			want[m.CPU]--
		}
		for cpu, n := range want {
			if n != 0 {
				t.Errorf("Inspect shows %d members too few on cpu %d: %+v", n, cpu, g.Members)
			}
		}

		const perCPU = 150
		out := make(chan landing, perCPU*len(cpus))
		wait := serveCPUs(ls, out)
		var wg sync.WaitGroup
		errs := make(chan error, len(cpus))
		for _, cpu := range cpus {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range perCPU {
					if err := dialFrom(cpu, addr); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("client: %v", err)
		}
		for _, l := range ls {
			l.Close()
		}
		wait()
		close(out)
		per := make([]int, len(ls))
		n := 0
		for l := range out {
			n++
			per[l.listener]++
			if got := cpuOf(l.listener); got != l.from {
				t.Errorf("a client on cpu %d landed on listener %d of cpu %d", l.from, l.listener, got)
			}
		}
		t.Logf("connections per listener (cpus %v, then unset): %v", cpus, per)
		if n != perCPU*len(cpus) {
			t.Errorf("%d connections served, want %d", n, perCPU*len(cpus))
		}
	})
}

// Coverage as Inspect sees it: members of one CPU only leave the others
// uncovered, and the error names them.
func TestUncovered(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cpus := onlineCPUs(t)
		cpu := cpus[0]
		l := listen(t, &reuseport.Config{Options: reuseport.Options{IncomingCPU: &cpu}}, "127.0.0.1:0")
		o := listen(t, &reuseport.Config{}, l.Addr().String())
		g, err := reuseport.Inspect(ctx, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Uncovered(cpus); !slices.Equal(got, cpus) {
			t.Errorf("before ReadCPUs, Uncovered = %v, want every CPU %v", got, cpus)
		}
		g.ReadCPUs()
		if got := g.Uncovered(cpus); !slices.Equal(got, cpus[1:]) {
			t.Errorf("Uncovered = %v, want %v", got, cpus[1:])
		}
		if got := g.Uncovered(cpus, inode(t, l)); !slices.Equal(got, cpus) {
			t.Errorf("Uncovered without the CPU member = %v, want %v", got, cpus)
		}
		err = g.CheckCovered(l.Addr().String(), cpus)
		var ue *reuseport.UncoveredError
		if !errors.Is(err, reuseport.ErrUncovered) || !errors.As(err, &ue) || !slices.Equal(ue.CPUs, cpus[1:]) || ue.Unknown != 0 {
			t.Errorf("CheckCovered = %v, want an *UncoveredError for %v", err, cpus[1:])
		}
		if err := reuseport.SetIncomingCPU(o, cpus[1]); err != nil {
			t.Fatal(err)
		}
		if g, err = reuseport.Inspect(ctx, l.Addr().String()); err != nil {
			t.Fatal(err)
		}
		g.ReadCPUs()
		if len(cpus) == 2 && g.CheckCovered(l.Addr().String(), cpus) != nil {
			t.Errorf("after SetIncomingCPU(%d) on the other member: %v", cpus[1], g.CheckCovered(l.Addr().String(), cpus))
		}
	})
}

func inode(t *testing.T, c interface {
	SyscallConn() (syscall.RawConn, error)
}) uint64 {
	t.Helper()
	var st unix.Stat_t
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) })
	if serr != nil {
		t.Fatal(serr)
	}
	return st.Ino
}

// In a PID namespace that kept its parent's /proc (as the restart benchmark's
// runs and some container runtimes do), /proc's PIDs are not ours: Inspect
// still reads each member's CPU.
func TestMemberCPUInPIDNamespace(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0, PIDNamespace: true}, func(t *testing.T) {
		cpus := onlineCPUs(t)
		cpu := cpus[1]
		l := listen(t, &reuseport.Config{Options: reuseport.Options{IncomingCPU: &cpu}}, "127.0.0.1:0")
		g, err := reuseport.Inspect(ctx, l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		g.ReadCPUs()
		if len(g.Members) != 1 || g.Members[0].CPU != cpu {
			t.Fatalf("members %+v, want one with cpu %d", g.Members, cpu)
		}
	})
}

// ListenPerCPU on an address a listener without SO_REUSEPORT holds: the
// first listen's typed error, once, and nothing left open.
func TestListenPerCPUError(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		var lc net.ListenConfig
		lc.SetMultipathTCP(false)
		plain, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		ls, err := (&reuseport.Config{}).ListenPerCPU(ctx, "tcp4", plain.Addr().String())
		var oe *net.OpError
		if ls != nil || !errors.Is(err, reuseport.ErrNotReusable) || !errors.As(err, &oe) || oe.Addr.String() != plain.Addr().String() {
			t.Fatalf("ListenPerCPU = %v, %v; want nil and a *net.OpError for %s wrapping ErrNotReusable", ls, err, plain.Addr())
		}
		if n := strings.Count(err.Error(), "listen tcp4"); n != 1 {
			t.Errorf("error %q names the operation %d times, want once", err, n)
		}
	})
}

// A member whose holders let go of it between Inspect and ReadCPUs (here our
// own process, which closes both its fds of it) is unknown, and
// CheckCovered's error counts it in NotHeld: read again, the group no longer
// lists it. A member read without holders (InspectMembers lists none) is
// unknown but not NotHeld: reading again would not help.
func TestUncoveredNotHeld(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cpus := onlineCPUs(t)
		l := listen(t, &reuseport.Config{Options: reuseport.Options{IncomingCPU: &cpus[0]}}, "127.0.0.1:0")
		addr := l.Addr().String()
		m, err := (&reuseport.Config{Options: reuseport.Options{IncomingCPU: &cpus[1]}}).Listen(ctx, "tcp4", addr)
		if err != nil {
			t.Fatal(err)
		}
		f, err := m.File()
		if err != nil {
			t.Fatal(err)
		}
		g, err := reuseport.Inspect(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		m.Close()
		f.Close()
		g.ReadCPUs()
		err = g.CheckCovered(addr, cpus)
		var ue *reuseport.UncoveredError
		if !errors.As(err, &ue) || !slices.Equal(ue.CPUs, cpus[1:]) || ue.Unknown != 1 || ue.NotHeld != 1 || !strings.Contains(err.Error(), "let go of them") {
			t.Fatalf("CheckCovered after the member's holder let go = %v (%+v); want cpus %v uncovered, 1 unknown, 1 not held", err, ue, cpus[1:])
		}
		if g, err = reuseport.Inspect(ctx, addr); err != nil {
			t.Fatal(err)
		}
		g.ReadCPUs()
		if len(g.Members) != 1 || g.Members[0].CPU != cpus[0] {
			t.Fatalf("read again: members %+v, want the one of cpu %d", g.Members, cpus[0])
		}

		listen(t, &reuseport.Config{Options: reuseport.Options{IncomingCPU: &cpus[1]}}, addr)
		if g, err = reuseport.InspectMembers(ctx, addr); err != nil {
			t.Fatal(err)
		}
		g.ReadCPUs()
		err = g.CheckCovered(addr, cpus)
		if !errors.As(err, &ue) || ue.Unknown != 2 || ue.NotHeld != 0 {
			t.Fatalf("CheckCovered without holders = %v (%+v); want 2 unknown, none not held", err, ue)
		}
	})
}
