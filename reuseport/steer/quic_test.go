package steer_test

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// The layout of these tests' connection IDs: 16 bytes, the generation at
// byte 3 (not 0, so that an offset the program ignores shows).
var testLayout = steer.QUIC{CIDLen: 16, GenOffset: 3}

// cid returns a random connection ID of the test layout naming gen.
func cid(gen byte) []byte {
	id := make([]byte, testLayout.CIDLen)
	rand.Read(id)
	id[testLayout.GenOffset] = gen
	return id
}

// shortPacket is a 1-RTT datagram to the connection id.
func shortPacket(id []byte) []byte {
	return append(append([]byte{0x40}, id...), make([]byte, 40)...)
}

// longPacket is a QUIC v1 long header datagram of type typ (0 Initial,
// 2 Handshake) to dcid from the SCID 1, 2, ... 8, padded to 1200 bytes.
func longPacket(typ byte, dcid []byte) []byte {
	return longFrom(typ, dcid, []byte{1, 2, 3, 4, 5, 6, 7, 8})
}

// longFrom is longPacket from scid.
func longFrom(typ byte, dcid, scid []byte) []byte {
	b := []byte{0xc0 | typ<<4, 0, 0, 0, 1, byte(len(dcid))}
	b = append(b, dcid...)
	b = append(b, byte(len(scid)))
	b = append(b, scid...)
	return append(b, make([]byte, 1200-len(b))...)
}

// gens are generation sockets on one port, in one reuseport group.
type gens struct {
	t     *testing.T
	socks []*reuseport.PacketConn
}

// recv reads every datagram waiting on each socket (until it stays quiet
// for quiet) and returns how many each got, and their first bytes.
func (g *gens) recv(quiet time.Duration) ([]int, [][]byte) {
	counts := make([]int, len(g.socks))
	got := make([][]byte, len(g.socks))
	buf := make([]byte, 2048)
	for i, s := range g.socks {
		for {
			s.SetReadDeadline(time.Now().Add(quiet))
			n, _, err := s.ReadFrom(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			if err != nil {
				g.t.Fatal(err)
			}
			counts[i]++
			got[i] = append(got[i], buf[:min(n, 32)]...)
		}
	}
	return counts, got
}

// Two generations' sockets in one reuseport group on one UDP port: each gets
// exactly the datagrams whose connection ID names it; a client's Initials
// follow its first across a change of the newest, whatever their DCID; a
// new client goes to the newest, even with a DCID that names an older
// generation; garbage goes to the newest.
func TestQUICSteersByConnectionID(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		quicSteers(t, "udp4", "127.0.0.1:0")
	})
}

// The same over IPv6: the program reads the same UDP payload.
func TestQUICSteersIPv6(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		quicSteers(t, "udp6", "[::1]:0")
	})
}

func quicSteers(t *testing.T, network, address string) {
	netnstest.CheckLeaks(t)
	dir := netnstest.MountBPF(t, "0755")
	cfg := &steer.Config{Dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := reuseport.ListenPacket(ctx, network, address)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := reuseport.ListenPacket(ctx, network, a.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	g := &gens{t: t, socks: []*reuseport.PacketConn{a, b}}
	m1, err := cfg.JoinQUIC(ctx, a, 1, testLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m1.Close()
	dial := func() *net.UDPConn {
		t.Helper()
		c, err := net.DialUDP(network, nil, a.LocalAddr().(*net.UDPAddr))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client := dial()
	defer client.Close()
	sendOn := func(c *net.UDPConn, pkts ...[]byte) {
		t.Helper()
		for _, p := range pkts {
			if _, err := c.Write(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(pkts ...[]byte) { t.Helper(); sendOn(client, pkts...) }
	// Generation 1 alone: a client's handshake begins on it.
	straddling := []byte{9, 9, 9, 9, 9, 9, 9, 9}
	send(longPacket(0, straddling))
	if n, _ := g.recv(200 * time.Millisecond); n[0] != 1 || n[1] != 0 {
		t.Fatalf("first Initial reached %v, want generation 1's socket only", n)
	}
	m2, err := cfg.JoinQUIC(ctx, b, 2, testLayout)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if nw, err := m1.Newest(); err != nil || nw != 2 {
		t.Fatalf("newest %d (%v), want 2", nw, err)
	}
	const per = 50
	var pkts [][]byte
	for range per {
		pkts = append(pkts, shortPacket(cid(1)), shortPacket(cid(2)), longPacket(2, cid(1)), longPacket(2, cid(2)))
	}
	send(pkts...)
	n, got := g.recv(200 * time.Millisecond)
	if n[0] != 2*per || n[1] != 2*per {
		t.Fatalf("datagrams per socket %v, want %d each", n, 2*per)
	}
	checkGens(t, got[0], 1)
	checkGens(t, got[1], 2)

	// The rest of the client's handshake follows its first datagram,
	// whatever the DCID (the one it chose, or one a server gave it).
	send(longPacket(0, straddling), longPacket(0, cid(2)))
	if n, _ := g.recv(200 * time.Millisecond); n[0] != 2 || n[1] != 0 {
		t.Fatalf("Initials of the handshake begun on generation 1: %v, want 2 and 0", n)
	}
	// A new client goes to the newest, even with a DCID it chose that
	// looks like one of generation 1's, and so does its next Initial;
	// so does the first client with another SCID (another connection
	// on its socket).
	other := dial()
	defer other.Close()
	sendOn(other, longPacket(0, cid(1)), longPacket(0, straddling))
	send(longFrom(0, straddling, []byte{4, 4, 4, 4}))
	if n, _ := g.recv(200 * time.Millisecond); n[0] != 0 || n[1] != 3 {
		t.Fatalf("Initials of new clients: %v, want 0 and 3", n)
	}

	// Garbage: empty, 1 byte, short headers too short for an ID, a
	// long header cut in its DCID, a DCID length over 20, an unknown
	// version, an ID naming a generation without socket.
	junk := [][]byte{{}, {0x40}, {0x40, 1, 2, 3}, {0xc0, 0, 0, 0, 1, 16, 1, 2}, {0xc0, 0, 0, 0, 1, 200, 1, 2, 3},
		{0xc0, 0xde, 0xad, 0xbe, 0xef, 4, 1, 2, 3, 4}, shortPacket(cid(3)), longPacket(2, cid(200)), longPacket(2, []byte{1, 2})}
	send(junk...)
	if n, _ := g.recv(200 * time.Millisecond); n[0] != 0 || n[1] != len(junk) {
		t.Fatalf("bad datagrams per socket %v, want all %d on the newest", n, len(junk))
	}
	c1, err := m1.Counters()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := m2.Counters()
	if err != nil {
		t.Fatal(err)
	}
	// Generation 1's counters were reset when it joined, before its
	// first Initial.
	want1 := steer.QUICCounters{ByID: 2 * per, Remembered: 2, Newest: 1}
	want2 := steer.QUICCounters{ByID: 2 * per, Remembered: 1, Newest: 2, Fallback: uint64(len(junk))}
	if c1 != want1 || c2 != want2 {
		t.Fatalf("counters %+v and %+v, want %+v and %+v", c1, c2, want1, want2)
	}

	// The newest leaves, socket first (as documented): generation 1 is
	// the newest again, and gets generation 2's datagrams (its server is
	// gone: they are garbage).
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	g.socks = g.socks[:1]
	if err := m2.Close(); err != nil {
		t.Fatal(err)
	}
	if nw, err := m1.Newest(); err != nil || nw != 1 {
		t.Fatalf("newest %d (%v) after generation 2 left, want 1", nw, err)
	}
	send(shortPacket(cid(2)), longPacket(0, []byte{5, 5, 5, 5, 5, 5, 5, 5}))
	if n, _ := g.recv(200 * time.Millisecond); n[0] != 2 {
		t.Fatalf("after generation 2 left: %v, want 2 on generation 1", n)
	}
	if err := m1.Close(); err != nil {
		t.Fatal(err)
	}
	if p := pins(t, dir); len(p) != 0 {
		t.Fatalf("pins left after the last member: %v", p)
	}
}

// checkGens checks every datagram (32-byte prefixes, concatenated) names gen.
func checkGens(t *testing.T, got []byte, gen byte) {
	t.Helper()
	for i := 0; i+32 <= len(got); i += 32 {
		d := got[i : i+32]
		off := 1
		if d[0]&0x80 != 0 {
			off = 6
		}
		if d[off+testLayout.GenOffset] != gen {
			t.Fatalf("datagram % x on generation %d's socket", d, gen)
		}
	}
}

// JoinQUIC's errors: a TCP listener (reuseport.ErrNotSupported), a layout
// out of range (ErrBadSlot), a layout other than the group's
// (ErrIncompatible), no CAP_BPF (ErrPermission, os.ErrPermission), each a
// *net.OpError naming the operation once; none leaves pins behind.
func TestQUICJoinErrors(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		dir := netnstest.MountBPF(t, "1777")
		cfg := &steer.Config{Dir: dir}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		isOpUDP := func(err error, want error) {
			t.Helper()
			var oe *net.OpError
			if !errors.Is(err, want) || !errors.As(err, &oe) || oe.Op != "steer join" || oe.Net != "udp" ||
				strings.Count(err.Error(), "steer join") != 1 {
				t.Fatalf("error %v, want a *net.OpError (steer join udp) matching %v", err, want)
			}
		}
		l := listen(t, "127.0.0.1:0", reuseport.Options{})
		_, err := cfg.JoinQUIC(ctx, l, 1, testLayout)
		if !errors.Is(err, reuseport.ErrNotSupported) {
			t.Fatalf("JoinQUIC(TCP listener): %v, want ErrNotSupported", err)
		}
		a, err := reuseport.ListenPacket(ctx, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		for _, q := range []steer.QUIC{{}, {CIDLen: 21}, {CIDLen: 8, GenOffset: 8}, {CIDLen: 8, GenOffset: -1}} {
			_, err := cfg.JoinQUIC(ctx, a, 1, q)
			isOpUDP(err, steer.ErrBadSlot)
		}
		m, err := cfg.JoinQUIC(ctx, a, 1, testLayout)
		if err != nil {
			t.Fatal(err)
		}
		b, err := reuseport.ListenPacket(ctx, "udp4", a.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		_, err = cfg.JoinQUIC(ctx, b, 2, steer.QUIC{CIDLen: 16, GenOffset: 0})
		isOpUDP(err, steer.ErrIncompatible)
		if nw, err := m.Newest(); err != nil || nw != 1 {
			t.Fatalf("newest %d (%v) after a refused join, want 1", nw, err)
		}
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := m.Counters(); !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Counters after Close: %v, want os.ErrClosed", err)
		}
		if p := pins(t, dir); len(p) != 0 {
			t.Fatalf("pins left: %v", p)
		}
		out := nobody(t, netnstest.ExecutableCopy(t), dir, "joinquic", "127.0.0.1:0")
		t.Logf("as uid 65534: %s", out)
		if !strings.HasPrefix(out, "permission=true os=true op=true ") {
			t.Fatalf("helper said %q", out)
		}
		if p := pins(t, dir); len(p) != 0 {
			t.Fatalf("pins left by the refused join: %v", p)
		}
	})
}
