package quicdrain

import (
	"bytes"
	"context"
	"crypto/rand"
	"net"
	"os"
	"testing"
	"time"
)

func TestCIDCodec(t *testing.T) {
	key := make([]byte, KeyLen)
	rand.Read(key)
	c, err := newCIDCodec(key, 258) // low byte 2
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		id, err := c.GenerateConnectionID()
		if err != nil {
			t.Fatal(err)
		}
		if id.Len() != CIDLen {
			t.Fatalf("length %d", id.Len())
		}
		gb, ok := c.generation(id.Bytes())
		if !ok || gb != 2 {
			t.Fatalf("generation(%x) = %d, %t; want 2, true", id.Bytes(), gb, ok)
		}
	}
	// A forged or random ID passes the 2-byte tag about once in 65536.
	passed := 0
	for range 20000 {
		b := make([]byte, CIDLen)
		rand.Read(b)
		if _, ok := c.generation(b); ok {
			passed++
		}
	}
	if passed > 5 {
		t.Errorf("%d of 20000 random IDs passed the tag", passed)
	}
	other, _ := newCIDCodec(make([]byte, KeyLen), 2)
	id, _ := other.GenerateConnectionID()
	if _, ok := c.generation(id.Bytes()); ok {
		// once in 65536: not worth a flaky test, but say so
		t.Logf("an ID of another key passed (1 in 65536)")
	}
	if _, ok := c.generation(make([]byte, 8)); ok {
		t.Errorf("an 8-byte ID passed")
	}
}

func TestParseHeader(t *testing.T) {
	dcid := bytes.Repeat([]byte{7}, 8)
	long := func(first byte, version uint32, id []byte) []byte {
		b := []byte{first, byte(version >> 24), byte(version >> 16), byte(version >> 8), byte(version), byte(len(id))}
		return append(append(b, id...), 0, 1, 2, 3)
	}
	for _, tc := range []struct {
		name         string
		b            []byte
		ok, long, cc bool
	}{
		{"empty", nil, false, false, false},
		{"short header", append([]byte{0x40}, bytes.Repeat([]byte{1}, CIDLen)...), true, false, false},
		{"short header too short", []byte{0x40, 1, 2}, false, false, false},
		{"v1 Initial", long(0xc0, version1, dcid), true, true, true},
		{"v1 0-RTT", long(0xd0, version1, dcid), true, true, true},
		{"v1 Handshake", long(0xe0, version1, dcid), true, true, false},
		{"v2 Initial", long(0xd0, version2, dcid), true, true, true},
		{"v2 Handshake", long(0xf0, version2, dcid), true, true, false},
		{"unknown version", long(0xe0, 0x0a0a0a0a, dcid), true, true, true},
		{"DCID over 20 bytes", long(0xc0, version1, make([]byte, 21)), false, false, false},
		{"truncated DCID", []byte{0xc0, 0, 0, 0, 1, 20, 1, 2}, false, false, false},
	} {
		h, ok := parseHeader(tc.b)
		if ok != tc.ok || (ok && (h.long != tc.long || h.clientChosen != tc.cc)) {
			t.Errorf("%s: got %+v %t, want ok %t long %t clientChosen %t", tc.name, h, ok, tc.ok, tc.long, tc.cc)
		}
	}
}

func TestTableBounded(t *testing.T) {
	tb := newDCIDTable(64, time.Minute)
	now := time.Now()
	for i := range 10000 {
		tb.route([]byte{byte(i), byte(i >> 8), 1, 2, 3, 4, 5, 6}, 1, now)
	}
	if len(tb.m) != 64 || tb.n != 64 {
		t.Errorf("%d entries (ring %d), want 64", len(tb.m), tb.n)
	}
	if got := tb.evicted.Load(); got != 10000-64 {
		t.Errorf("evicted %d, want %d", got, 10000-64)
	}
	k := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	tb.route(k, 3, now)
	tb.route(k, 3, now)
	if e, ok := tb.lookup(k, now); !ok || e.gen != 3 || e.initials != 2 || tb.multi.Load() != 1 {
		t.Errorf("entry %+v %t, multi %d", e, ok, tb.multi.Load())
	}
	if _, ok := tb.lookup(k, now.Add(2*time.Minute)); ok {
		t.Errorf("an expired entry routes")
	}
}

func TestHandoverDecodeGarbage(t *testing.T) {
	g := &Gen{gen: 5, table: newDCIDTable(16, time.Minute), dests: map[uint64]*dest{}}
	codec, _ := newCIDCodec(make([]byte, KeyLen), 4)
	g.codec.Store(codec)
	for i := range 2000 {
		b := make([]byte, i%200)
		rand.Read(b)
		if len(b) > 28 {
			b[25], b[26], b[27], b[28] = 0, 0, 0, byte(i%4) // small counts, so entries are parsed
		}
		g.applyHandover(b) // must not panic
	}
	live := map[string]tableEntry{"abcdefgh": {gen: 4, seen: time.Now()}, "ijklmnop": {gen: 9, seen: time.Now()}}
	if err := g.applyHandover(encodeHandover(codec, live, time.Now())); err == nil {
		t.Errorf("a handover naming generation 9 (ours is 5) was taken")
	}
	delete(live, "ijklmnop")
	g.table = newDCIDTable(16, time.Minute)
	if err := g.applyHandover(encodeHandover(codec, live, time.Now())); err != nil {
		t.Fatal(err)
	}
	if e, ok := g.table.lookup([]byte("abcdefgh"), time.Now()); !ok || e.gen != 4 {
		t.Errorf("entry %+v %t after handover", e, ok)
	}
}

// pair is two generations on one UDP socket (two fds), as after a handoff.
type pair struct {
	old, new *Gen
	addr     *net.UDPAddr
}

func newPair(t testing.TB, cfg Config) *pair {
	t.Helper()
	cfg.Dir = t.TempDir()
	u1, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	f, err := u1.File()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.FilePacketConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{addr: u1.LocalAddr().(*net.UDPAddr)}
	if p.old, err = New(u1, 7, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.old.Close() })
	if err := p.old.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.new, err = New(pc.(*net.UDPConn), 8, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.new.Close() })
	return p
}

// switchOver hands the socket from old to new.
func (p *pair) switchOver(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := p.old.Handover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.new.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.new.Stats(); st.HandoverTimeouts != 0 || st.HandoverErrors != 0 {
		t.Fatalf("new generation's handover: %+v", st)
	}
}

func initial(dcid []byte, size int) []byte {
	b := append([]byte{0xc3, 0, 0, 0, 1, byte(len(dcid))}, dcid...)
	b = append(b, 8, 1, 2, 3, 4, 5, 6, 7, 8)
	return append(b, make([]byte, size-len(b))...)
}

func waitStats(t *testing.T, g *Gen, what string, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st := g.Stats(); cond(st) {
			return st
		}
		time.Sleep(time.Millisecond)
	}
	st := g.Stats()
	t.Fatalf("generation %d: no %s within 10 s: %+v", g.gen, what, st)
	return st
}

// TestStraddle sends the first Initial datagram of a handshake before the
// switch and the second after it: the second reaches the old generation
// (forwarded by the table it handed over), and a new client's Initial stays
// with the new one.
func TestStraddle(t *testing.T) {
	p := newPair(t, Config{})
	c, err := net.DialUDP("udp", nil, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dcid := []byte("straddle")
	c.Write(initial(dcid, 1200))
	waitStats(t, p.old, "first Initial", func(s Stats) bool { return s.Read == 1 && s.Own == 1 })
	p.switchOver(t)
	c.Write(initial(dcid, 1200))
	c.Write(initial([]byte("newcomer"), 1200))
	st := waitStats(t, p.new, "second Initial forwarded", func(s Stats) bool { return s.Read == 2 })
	if st.Straddled != 1 || st.Forwarded != 1 || st.Own != 1 || st.HandedOver != 1 {
		t.Errorf("new generation: %+v; want 1 straddled, 1 forwarded, 1 own, 1 handed over", st)
	}
	old := waitStats(t, p.old, "forwarded Initial", func(s Stats) bool { return s.Received == 1 })
	if old.Own != 2 || old.Read != 1 {
		t.Errorf("old generation: %+v; want 2 own, 1 read", old)
	}
	// The old generation, whose Initials it routed, counts the ClientHello
	// in two datagrams at the new one.
	if st.MultiInitial != 1 {
		t.Errorf("MultiInitial %d, want 1", st.MultiInitial)
	}
}

// TestBadInput floods the new generation with garbage, forged connection
// IDs, datagrams for the old generation beyond its queues, and Initials
// with fresh DCIDs, and the old one's forwarding socket with garbage: no
// panic, the table and the heap stay bounded, every datagram is counted.
// Neither Transport has a listener, so neither reads its queue (Queue 8):
// the queues fill, and DropQueue counts the rest.
func TestBadInput(t *testing.T) {
	noLeaks(t, func() {
		p := newPair(t, Config{Queue: 8, MaxHandshakes: 256})
		p.switchOver(t)
		c, err := net.DialUDP("udp", nil, p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkHeap := heapBound(t)
		const n = 3000
		sent := 0
		send := func(b []byte) {
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			sent++
			if sent%40 == 0 { // let the reader keep up: the kernel queue is not under test
				waitStats(t, p.new, "reads", func(s Stats) bool { return s.Read >= int64(sent-4) })
			}
		}
		oldCodec := p.old.codec.Load()
		for i := range n {
			garbage := make([]byte, i%40)
			rand.Read(garbage)
			if len(garbage) > 0 {
				garbage[0] |= 0x80 // a long header whose DCID length is mostly over 20 or truncated
				if len(garbage) > 5 {
					garbage[5] = 200
				}
			}
			send(garbage)
			forged := make([]byte, 1+CIDLen+30)
			rand.Read(forged)
			forged[0], forged[1] = 0x40, 7 // short header, generation 7, random tag
			send(forged)
			id, _ := oldCodec.GenerateConnectionID()
			send(shortPacket(id.Bytes(), 1000)) // a real ID of the old generation
			dcid := make([]byte, 8)
			rand.Read(dcid)
			send(initial(dcid, 1200))
		}
		st := waitStats(t, p.new, "all reads", func(s Stats) bool { return s.Read == int64(sent) })
		accounted := st.Own + st.Forwarded + st.Malformed + st.Unknown + st.DropQueue + st.DropFull
		if accounted != st.Read {
			t.Errorf("read %d, accounted %d: %+v", st.Read, accounted, st)
		}
		if st.Malformed < n-40 || st.Unknown < n-1 || st.Forwarded+st.DropFull < n {
			t.Errorf("counters %+v: want about %d malformed, %d unknown, %d forwarded or dropped", st, n, n, n)
		}
		if old := p.old.Stats(); st.DropQueue == 0 || old.DropQueue == 0 || old.Own > 8 {
			t.Errorf("queues: new %+v, old %+v; want drops past 8 queued", st, old)
		}
		if len(p.new.table.m) > 256 || st.Evicted == 0 {
			t.Errorf("table: %d entries, %d evicted; want at most 256, some evicted", len(p.new.table.m), st.Evicted)
		}
		// garbage on the old generation's forwarding socket
		fc, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: p.old.path(7), Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			b := make([]byte, i%30)
			rand.Read(b)
			if i%2 == 0 && len(b) > 0 {
				b[0] = msgData
			}
			fc.Write(b)
		}
		fc.Write([]byte{msgHandover, 1, 2, 3})
		fc.Close()
		waitStats(t, p.old, "bad forwards", func(s Stats) bool { return s.BadForward >= 100 })
		checkHeap()
		t.Logf("new: %+v", st)
		t.Logf("old: %+v", p.old.Stats())
		p.new.Close()
		p.old.Close()
	})
}

// TestOldGenerationCrashed: the old generation dies without closing (its
// forwarding socket's file stays, nobody reads it): the new generation drops
// its datagrams, counts them in DropGone, and answers none of them.
func TestOldGenerationCrashed(t *testing.T) {
	p := newPair(t, Config{})
	p.switchOver(t)
	id, _ := p.old.codec.Load().GenerateConnectionID()
	p.old.fwd.c.Close() // as a crash: the file stays
	if _, err := os.Stat(p.old.path(7)); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := shortPacket(id.Bytes(), 100)
	for range 50 {
		c.Write(msg)
	}
	st := waitStats(t, p.new, "50 reads", func(s Stats) bool { return s.Read == 50 })
	if st.DropGone != 50 || st.Forwarded != 0 || st.Own != 0 {
		t.Errorf("new generation: %+v; want 50 dropped as gone", st)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1500)); err == nil {
		t.Errorf("got a %d-byte answer (a stateless reset?)", n)
	}
}
