package quicdrain

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// benchRoute sends b.N datagrams one at a time, each a short header
// packet with a connection ID of generation to (old or new), and waits for
// it in that generation's Transport queue: ns/op is the time from the
// client's write to the datagram's arrival where quic-go would read it, and
// cpu-ns/op the CPU time (user+system) of the whole process per datagram.
func benchRoute(b *testing.B, toOld bool) {
	p := newPair(b, Config{})
	defer p.old.Close()
	defer p.new.Close()
	if err := p.old.Handover(b.Context()); err != nil {
		b.Fatal(err)
	}
	if err := p.new.Start(b.Context()); err != nil {
		b.Fatal(err)
	}
	dst := p.new
	if toOld {
		dst = p.old
	}
	id, _ := dst.codec.Load().GenerateConnectionID()
	c, err := net.DialUDP("udp", nil, p.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	sendEach(b, c, dst, shortPacket(id.Bytes(), 1200))
	st := p.new.Stats()
	if toOld && st.Forwarded < int64(b.N) {
		b.Fatalf("forwarded %d of %d", st.Forwarded, b.N)
	}
}

// sendEach sends msg on c b.N times, one at a time, and waits for each in
// dst's Transport queue (timed); it reports the CPU time (user+system) of
// the whole process per datagram, as cpu-ns/op.
func sendEach(b *testing.B, c net.Conn, dst *Gen, msg []byte) {
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
}

// BenchmarkDirect: datagrams of the generation that reads the socket.
func BenchmarkDirect(b *testing.B) { benchRoute(b, false) }

// BenchmarkForwarded: datagrams of the older generation, forwarded to it
// over its unix datagram socket.
func BenchmarkForwarded(b *testing.B) { benchRoute(b, true) }
