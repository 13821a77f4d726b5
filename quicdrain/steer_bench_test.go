package quicdrain

import (
	"net"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport/steer"
	"golang.org/x/sys/unix"
)

const envSteerBenchNetNS = "ZERODROP_QUIC_STEER_BENCH_NETNS"

// BenchmarkSteered is BenchmarkForwarded with the kernel routing: two
// steered generations (7, then 8, the newest) on sockets of their own;
// "short": datagrams of generation 7's connection, which the program gives
// to 7's socket; "initial": Initials of a client the program remembers, on
// the newest. ns/op and cpu-ns/op as in benchRoute, and prog-ns/run the
// program's mean run time (kernel BPF stats). It re-runs itself in a fresh
// network namespace (root only).
func BenchmarkSteered(b *testing.B) {
	if !netnstest.BenchInNamespace(b, envSteerBenchNetNS) {
		return
	}
	sc := &steer.Config{Dir: netnstest.MountBPF(b, "0700")}
	var gens []*Gen
	var members []*steer.QUICMember
	addr := "127.0.0.1:0"
	for _, gen := range []uint64{7, 8} {
		g, err := ListenSteered(b.Context(), "udp4", addr, gen, Config{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		addr = g.udp.LocalAddr().String()
		if err := g.Start(b.Context()); err != nil {
			b.Fatal(err)
		}
		m, err := sc.JoinQUIC(b.Context(), g, gen, steer.QUIC{CIDLen: CIDLen, GenOffset: CIDGenOffset})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		gens, members = append(gens, g), append(members, m)
	}
	c, err := net.Dial("udp4", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	prog, err := ebpf.LoadPinnedProgram(filepath.Join(members[0].Dir(), "prog"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer prog.Close()
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	id, _ := gens[0].codec.Load().GenerateConnectionID()
	short := shortPacket(id.Bytes(), 1200)
	b.Run("short", func(b *testing.B) { steeredRoute(b, prog, c, gens[0], short) })
	// An Initial of a client the program remembers (its first went to the
	// newest): 8-byte DCID and SCID, padded to 1200 bytes.
	initial := []byte{0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9}
	initial = append(initial, make([]byte, 1200-len(initial))...)
	b.Run("initial", func(b *testing.B) { steeredRoute(b, prog, c, gens[1], initial) })
	if st := gens[0].Stats(); st.Forwarded != 0 || st.Dropped() != 0 {
		b.Fatalf("generation 7 forwarded %d, dropped %d: want 0", st.Forwarded, st.Dropped())
	}
	if st := gens[1].Stats(); st.Forwarded != 0 || st.Dropped() != 0 {
		b.Fatalf("generation 8 forwarded %d, dropped %d: want 0", st.Forwarded, st.Dropped())
	}
	if cnt, err := members[0].Counters(); err != nil || cnt.Newest+cnt.Remembered+cnt.Fallback != 0 {
		b.Fatalf("generation 7's counters %+v (%v): want datagrams by ID only", cnt, err)
	}
}

// steeredRoute sends msg b.N times, one at a time, and waits for each in
// dst's Transport queue; it reports the process's CPU time and the
// program's mean run time per datagram.
func steeredRoute(b *testing.B, prog *ebpf.Program, c net.Conn, dst *Gen, msg []byte) {
	before, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	sendEach(b, c, dst, msg)
	if after, err := prog.Stats(); err == nil && after.RunCount > before.RunCount {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(after.RunCount-before.RunCount), "prog-ns/run")
	}
}
