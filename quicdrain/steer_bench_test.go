package quicdrain

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport/steer"
	"golang.org/x/sys/unix"
)

const envSteerBenchNetNS = "ZERODROP_QUIC_STEER_BENCH_NETNS"

// BenchmarkSteered is BenchmarkForwarded with the kernel routing: two
// steered generations (7, then 8, the newest) on sockets of their own, and
// datagrams of generation 7's connection, which the program gives to 7's
// socket; ns/op and cpu-ns/op as in benchRoute, and prog-ns/run the
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
	dst := gens[0]
	id, _ := dst.codec.Load().GenerateConnectionID()
	msg := append([]byte{0x40}, append(id.Bytes(), make([]byte, 1200)...)...)
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
	before, err := prog.Stats()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 2048)
	dst.own.SetReadDeadline(time.Now().Add(time.Hour))
	var r0, r1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, _, err := dst.own.ReadFrom(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	cpu := time.Duration(r1.Utime.Nano() + r1.Stime.Nano() - r0.Utime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if after, err := prog.Stats(); err == nil && after.RunCount > before.RunCount {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(after.RunCount-before.RunCount), "prog-ns/run")
	}
	if st := gens[1].Stats(); st.Read != 0 || st.Forwarded != 0 {
		b.Fatalf("the newest read %d datagrams, forwarded %d: want 0", st.Read, st.Forwarded)
	}
	if cnt, err := members[0].Counters(); err != nil || cnt.ByID < uint64(b.N) {
		b.Fatalf("steered by ID to generation 7: %+v (%v), want %d", cnt, err, b.N)
	}
}
