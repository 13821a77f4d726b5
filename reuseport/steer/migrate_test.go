package steer_test

import (
	"fmt"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

const (
	success = "TcpExt.TCPMigrateReqSuccess"
	failure = "TcpExt.TCPMigrateReqFailure"
	outRsts = "Tcp.OutRsts"
)

// member is a listener and its slot.
type member struct {
	l *reuseport.Listener
	m *steer.Member
}

// group opens one listener per option set on one port, joins each, and gives
// every slot but the first weight 0, so that new connections all queue at
// the first.
func group(t *testing.T, cfg *steer.Config, opts ...reuseport.Options) []member {
	t.Helper()
	var out []member
	addr := "127.0.0.1:0"
	for i, o := range opts {
		l := listen(t, addr, o)
		addr = l.Addr().String()
		m := join(t, cfg, l)
		if i > 0 {
			if err := m.SetWeight(0); err != nil {
				t.Fatal(err)
			}
		}
		out = append(out, member{l, m})
	}
	return out
}

// queue20 queues 20 clients (each sent "client i\n") at ms[0].
func queue20(t *testing.T, ms []member) *netnstest.Clients {
	t.Helper()
	cs := netnstest.Queue(t, ms[0].l.Addr().String(), 20, netnstest.ClientOptions{})
	netnstest.WaitQueue(t, ms[0].l, uint32(20))
	for i, m := range ms[1:] {
		if q := queued(t, m.l); q != 0 {
			t.Fatalf("member %d has %d queued, want 0", i+1, q)
		}
	}
	return cs
}

func counters(t *testing.T, m *steer.Member) steer.Counters {
	t.Helper()
	c, err := m.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sentBy20() []string {
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("client %d\n", i))
	}
	sort.Strings(want)
	return want
}

// With tcp_migrate_req=0, the program migrates a closing member's queue to the
// member it names: the live member of the same class with the lowest load (c),
// not the one of another class with a lower load (b), nor the draining one (d).
func TestMigrateToNamedTarget(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755")}
		x, y := reuseport.Options{}, reuseport.Options{NoDelay: true}
		ms := group(t, cfg, x, y, x, x, x)
		a, b, c, d, e := ms[0], ms[1], ms[2], ms[3], ms[4]
		for _, s := range []struct {
			m    member
			load uint32
		}{{b, 0}, {c, 1}, {d, 0}, {e, 2}} {
			if err := s.m.m.SetLoad(s.load); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.m.SetDraining(true); err != nil {
			t.Fatal(err)
		}
		cs := queue20(t, ms)
		snap := netnstest.Snapshot(t)
		a.l.Close()
		delta := snap.Delta(t, success, failure, outRsts)
		got := acceptN(t, c.l, 20, 5*time.Second)
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(sentBy20()) {
			t.Fatalf("target received %q, want each client's bytes", got)
		}
		if tally := cs.Await(5 * time.Second); tally[netnstest.Answered] != 20 {
			t.Fatalf("clients: %v, want 20 answered", tally)
		}
		if delta[success] != 20 || delta[failure] != 0 || delta[outRsts] != 0 {
			t.Fatalf("counters %v, want success +20, failure +0, resets +0", delta)
		}
		for i, m := range []member{b, d, e} {
			if q := queued(t, m.l); q != 0 {
				t.Fatalf("non-target %d got %d connections", i, q)
			}
		}
		ca, cc := counters(t, a.m), counters(t, c.m)
		if ca != (steer.Counters{Steered: 20, MigratedOut: 20}) || cc != (steer.Counters{MigratedIn: 20}) {
			t.Fatalf("counters closing %+v, target %+v", ca, cc)
		}
	})
}

// When no live member shares the closing member's class, MismatchDrop resets
// every queued connection (the kernel counts them as failures) and the member
// of the other class gets none; MismatchHash lets the kernel's hash hand them
// to it.
func TestMigrateMismatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mismatch steer.Mismatch
	}{{"drop", steer.MismatchDrop}, {"hash", steer.MismatchHash}} {
		t.Run(tc.name, func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
				cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755"), Mismatch: tc.mismatch}
				ms := group(t, cfg, reuseport.Options{}, reuseport.Options{NoDelay: true})
				a, b := ms[0], ms[1]
				cs := queue20(t, ms)
				snap := netnstest.Snapshot(t)
				a.l.Close()
				delta := snap.Delta(t, success, failure, outRsts)
				ca, cb := counters(t, a.m), counters(t, b.m)
				if tc.mismatch == steer.MismatchDrop {
					if q := queued(t, b.l); q != 0 {
						t.Fatalf("member of another class got %d", q)
					}
					if tally := cs.Await(5 * time.Second); tally[netnstest.Reset] != 20 {
						t.Fatalf("clients: %v, want 20 reset", tally)
					}
					if delta[success] != 0 || delta[failure] != 20 || delta[outRsts] != 20 {
						t.Fatalf("counters %v, want success +0, failure +20, resets +20", delta)
					}
					if ca.Dropped != 20 || cb.MigratedIn != 0 {
						t.Fatalf("counters closing %+v, other %+v", ca, cb)
					}
					return
				}
				acceptN(t, b.l, 20, 5*time.Second)
				if tally := cs.Await(5 * time.Second); tally[netnstest.Answered] != 20 {
					t.Fatalf("clients: %v, want 20 answered", tally)
				}
				if delta[success] != 20 || delta[failure] != 0 {
					t.Fatalf("counters %v, want success +20, failure +0", delta)
				}
				if ca.Dropped != 0 || cb.MigratedIn != 0 {
					t.Fatalf("counters closing %+v, other %+v: the hash, not the program, chose", ca, cb)
				}
			})
		})
	}
}

// Handshakes that complete after their listener closed migrate too, by the
// closed listener's class, even after its Member.Close: with TCP_DEFER_ACCEPT
// the server keeps each connection as a request until the client's first
// bytes, which come only after the close.
func TestMigrateHandshakes(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755")}
		o := reuseport.Options{DeferAccept: 5 * time.Second}
		ms := group(t, cfg, o, o)
		a, b := ms[0], ms[1]
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for range 20 {
			c, err := net.DialTimeout("tcp4", a.l.Addr().String(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
		}
		if qa, qb := queued(t, a.l), queued(t, b.l); qa != 0 || qb != 0 {
			t.Fatalf("queued %d, %d before any data, want 0, 0 (requests, not children)", qa, qb)
		}
		snap := netnstest.Snapshot(t)
		a.l.Close()
		if err := a.m.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range conns {
			if _, err := fmt.Fprintf(c, "client %d\n", i); err != nil {
				t.Fatal(err)
			}
		}
		got := acceptN(t, b.l, 20, 10*time.Second)
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(sentBy20()) {
			t.Fatalf("target received %q, want each client's bytes", got)
		}
		if d := snap.Delta(t, success, failure); d[success] != 20 || d[failure] != 0 {
			t.Fatalf("counters %v, want success +20, failure +0", d)
		}
		if cb := counters(t, b.m); cb.MigratedIn != 20 {
			t.Fatalf("target counters %+v, want 20 migrated in", cb)
		}
	})
}
