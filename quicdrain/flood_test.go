package quicdrain

import (
	"crypto/rand"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// TestInitialFloodDuringSwitch floods the socket with Initials of fresh
// connection IDs (each sent twice, as a ClientHello in two datagrams),
// garbage, and connection IDs naming generations that do not exist
// (forged with the lineage key: a successor not yet born, one long gone),
// while the old generation hands over to the new one. Neither Transport has
// a listener, so their queues (Queue 8) fill. No panic; every datagram
// either generation read is counted once (delivered, forwarded or dropped
// by cause); the table stays within MaxHandshakes and the handover within
// it; the heap stays bounded.
func TestInitialFloodDuringSwitch(t *testing.T) {
	noLeaks(t, func() {
		p := newPair(t, Config{Queue: 8, MaxHandshakes: 128})
		c, err := net.DialUDP("udp", nil, p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkHeap := heapBound(t)
		key := p.old.codec.Load().key
		unborn, _ := newCIDCodec(key, 9)
		gone, _ := newCIDCodec(key, 200)
		read := func() int64 { return p.old.Stats().Read + p.new.Stats().Read }
		var sent atomic.Int64
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			send := func(b []byte) {
				c.Write(b)
				if n := sent.Add(1); n%32 == 0 { // pace to the readers: the kernel's queue is not under test
					for deadline := time.Now().Add(10 * time.Second); read() < n-8 && time.Now().Before(deadline); {
						time.Sleep(100 * time.Microsecond)
					}
				}
			}
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				dcid := make([]byte, 8+i%13)
				rand.Read(dcid)
				send(initial(dcid, 1200))
				send(initial(dcid, 1200))
				garbage := make([]byte, i%50)
				rand.Read(garbage)
				send(garbage)
				for _, cc := range []*cidCodec{unborn, gone} {
					id, _ := cc.GenerateConnectionID()
					send(shortPacket(id.Bytes(), 40))
				}
			}
		}()
		waitStats(t, p.old, "flood", func(s Stats) bool { return s.Read > 2000 })
		p.switchOver(t)
		waitStats(t, p.new, "flood after the switch", func(s Stats) bool { return s.Read > 2000 })
		close(stop)
		<-done
		// every datagram sent was read (paced), by one generation or the other
		deadline := time.Now().Add(10 * time.Second)
		for read() != sent.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		old, st := p.old.Stats(), p.new.Stats()
		if got := old.Read + st.Read; got != sent.Load() {
			t.Errorf("%d datagrams read, %d sent", got, sent.Load())
		}
		for _, s := range []Stats{old, st} {
			// Own counts the forwarded datagrams the old generation received
			if acc := s.Own - s.Received + s.Forwarded + s.Malformed + s.Unknown + s.DropQueue + s.DropFull + s.DropGone; acc != s.Read {
				t.Errorf("generation %d: read %d, accounted %d: %+v", s.Generation, s.Read, acc, s)
			}
		}
		if st.HandedOver == 0 || st.HandedOver > 128 || len(p.new.table.m) > 128 || st.Evicted == 0 {
			t.Errorf("new generation: %d handed over, %d in the table, %d evicted; want 1 to 128, at most 128, some", st.HandedOver, len(p.new.table.m), st.Evicted)
		}
		if st.DropGone == 0 || st.DropQueue == 0 || old.DropQueue == 0 || st.Malformed == 0 {
			t.Errorf("drops: new %+v, old %+v; want unborn and gone generations dropped, queues full, garbage", st, old)
		}
		checkHeap()
		t.Logf("sent %d\nold: %+v\nnew: %+v", sent.Load(), old, st)
		p.new.Close()
		p.old.Close()
	})
}
