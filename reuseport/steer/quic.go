package steer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// QUIC says where a QUIC server's connection IDs carry its generation: the
// IDs it issues are CIDLen bytes, and the byte at GenOffset is the low byte of
// the generation number (package quicdrain: quicdrain.CIDLen and
// quicdrain.CIDGenOffset).
type QUIC struct {
	CIDLen    int // 1..20: the length of a short header's DCID
	GenOffset int // 0..CIDLen-1
}

// QUICCounters are what the program counted for one generation's socket.
type QUICCounters struct {
	ByID       uint64 `json:"by_id"`      // datagrams whose connection ID names the generation
	Remembered uint64 `json:"remembered"` // Initial/0-RTT datagrams of a client whose handshake began on it
	Newest     uint64 `json:"newest"`     // first Initial/0-RTT datagrams of a client (newest only)
	Fallback   uint64 `json:"fallback"`   // short, unknown or unplaceable datagrams (newest only)
}

// QUICMember is one generation's UDP socket in the QUIC steering group of its
// address. It does not own the socket. Close the socket's server first, then
// the member.
type QUICMember struct {
	addr   netip.AddrPort
	dir    string
	gen    uint32
	cookie uint64
	obj    *quicObjects
}

// JoinQUIC puts conn, the UDP socket (with SO_REUSEPORT, bound) of generation
// gen of a QUIC server, in the QUIC steering group of its address, in the
// calling thread's network namespace, and makes gen the newest generation:
// from then on the kernel gives conn the datagrams whose connection ID names
// gen (its low byte, at q.GenOffset), and every new connection. The other
// generations keep getting their own connections' datagrams on their own
// sockets: no datagram crosses processes. See the package doc, section QUIC.
//
// The first member creates and pins the program and maps (under
// c.Dir/<netns>/udp-<address>); later ones, in any process, open the pins and
// must give the same q (else ErrIncompatible). A socket already holding gen's
// entry is replaced. Serve on conn before calling JoinQUIC: Initials arrive at
// once. The caller keeps owning conn. Config.Slots, Mismatch and Balance do
// not apply.
//
// Linux 5.14+ (the program's expected attach type; tested on 6.18); needs
// CAP_BPF and CAP_NET_ADMIN (or root) and a bpf filesystem at c.Dir, else
// errors matching ErrPermission or ErrNoBPFFS. A socket that is not UDP:
// reuseport.ErrNotSupported.
func (c *Config) JoinQUIC(ctx context.Context, conn syscall.Conn, gen uint64, q QUIC) (*QUICMember, error) {
	ap, cookie, err := inspectUDP(conn)
	if err == nil && (q.CIDLen < 1 || q.CIDLen > maxCIDLen || q.GenOffset < 0 || q.GenOffset >= q.CIDLen) {
		err = fmt.Errorf("%w: QUIC layout: generation at byte %d of %d-byte IDs", ErrBadSlot, q.GenOffset, q.CIDLen)
	}
	if err != nil {
		return nil, neterr.OpText("steer join", "udp", ap.String(), err)
	}
	m := &QUICMember{addr: ap, gen: uint32(byte(gen)), cookie: cookie}
	if err := c.joinQUIC(ctx, conn, q, m); err != nil {
		return nil, neterr.OpText("steer join", "udp", ap.String(), err)
	}
	return m, nil
}

func (c *Config) joinQUIC(ctx context.Context, conn syscall.Conn, q QUIC, m *QUICMember) error {
	dir, err := c.groupDir(m.addr)
	if err != nil {
		return err
	}
	m.dir = filepath.Join(filepath.Dir(dir), "udp-"+filepath.Base(dir))
	return withLock(ctx, m.dir, true, func() error {
		obj, err := openQUIC(m.dir, q)
		if errors.Is(err, os.ErrNotExist) {
			unpinQUIC(m.dir)
			if obj, err = createQUIC(q); err == nil {
				if err = obj.pin(m.dir); err != nil {
					obj.Close()
				}
			}
		}
		if err != nil {
			// Leave no empty directories behind (os.Remove spares full ones).
			os.Remove(m.dir)
			os.Remove(filepath.Dir(m.dir))
			return permission(err)
		}
		m.obj = obj
		if err := m.fill(conn); err != nil {
			m.release()
			m.removeIfEmpty()
			obj.Close()
			m.obj = nil
			return err
		}
		return nil
	})
}

// fill puts the socket at its generation, resets its counters, attaches the
// program and makes the generation the newest. Lock held.
func (m *QUICMember) fill(conn syscall.Conn) error {
	o := m.obj
	err := linux.Control(conn, func(fd int) error {
		return o.sockets.Update(m.gen, uint64(fd), ebpf.UpdateAny)
	})
	if err != nil {
		return fmt.Errorf("add socket of generation %d: %w", m.gen, err)
	}
	zero := make([]quicCounters, ebpf.MustPossibleCPU())
	if err := o.counters.Put(m.gen, zero); err != nil {
		return fmt.Errorf("reset counters of generation %d: %w", m.gen, err)
	}
	if err := attach(conn, o.prog.FD()); err != nil {
		return err
	}
	return m.setNewest(m.gen)
}

func (m *QUICMember) setNewest(gen uint32) error {
	var cfg quicConfig
	if err := m.obj.config.Lookup(uint32(0), &cfg); err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	cfg.Newest = gen
	if err := m.obj.config.Put(uint32(0), cfg); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// Dir returns the bpffs directory holding the group's pins (the program's
// is "prog").
func (m *QUICMember) Dir() string { return m.dir }

// Generation returns the generation byte the member's socket stands for.
func (m *QUICMember) Generation() uint8 { return uint8(m.gen) }

// Newest returns the generation byte the program gives new connections to.
func (m *QUICMember) Newest() (uint8, error) {
	if m.obj == nil {
		return 0, neterr.OpText("steer newest", "udp", m.addr.String(), os.ErrClosed)
	}
	var cfg quicConfig
	if err := m.obj.config.Lookup(uint32(0), &cfg); err != nil {
		return 0, neterr.OpText("steer newest", "udp", m.addr.String(), err)
	}
	return uint8(cfg.Newest), nil
}

// Counters returns what the program counted for the member's generation
// since it joined (summed over CPUs).
func (m *QUICMember) Counters() (QUICCounters, error) {
	if m.obj == nil {
		return QUICCounters{}, neterr.OpText("steer counters", "udp", m.addr.String(), os.ErrClosed)
	}
	var per []quicCounters
	if err := m.obj.counters.Lookup(m.gen, &per); err != nil {
		return QUICCounters{}, neterr.OpText("steer counters", "udp", m.addr.String(), err)
	}
	var s QUICCounters
	for _, c := range per {
		s.ByID += c.ByID
		s.Remembered += c.Remembered
		s.Newest += c.Newest
		s.Fallback += c.Fallback
	}
	return s, nil
}

// Close takes the member's socket out of the group (if it is still the
// socket of its generation); if its generation was the newest, the newest
// live generation before it becomes the newest (a successor that gives up
// hands new connections back). The last member removes the pins. Safe to
// call twice.
func (m *QUICMember) Close() error {
	if m.obj == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	err := withLock(ctx, m.dir, false, func() error {
		return errors.Join(m.release(), m.removeIfEmpty())
	})
	err = errors.Join(err, m.obj.Close())
	m.obj = nil
	if err != nil {
		return neterr.OpText("steer close", "udp", m.addr.String(), err)
	}
	return nil
}

// release removes the member's socket (unless another socket took its
// generation's entry) and, if its generation was the newest, makes the
// newest live generation before it the newest. The socket may be gone
// already: the kernel removes a closed socket from the sockarray. Lock held.
func (m *QUICMember) release() error {
	var cookie uint64
	switch err := m.obj.sockets.Lookup(m.gen, &cookie); {
	case err == nil && cookie != m.cookie:
		return nil
	case err == nil:
		if err := m.obj.sockets.Delete(m.gen); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	case !errors.Is(err, ebpf.ErrKeyNotExist):
		return err
	}
	var cfg quicConfig
	if err := m.obj.config.Lookup(uint32(0), &cfg); err != nil || cfg.Newest != m.gen {
		return err
	}
	for back := uint32(1); back < quicGens; back++ {
		g := (m.gen - back) % quicGens
		if m.obj.sockets.Lookup(g, &cookie) == nil {
			return m.setNewest(g)
		}
	}
	return m.setNewest(quicGens)
}

// removeIfEmpty removes the pins and the directories when no generation
// has a socket. Lock held.
func (m *QUICMember) removeIfEmpty() error {
	if m.obj != nil {
		var cookie uint64
		for g := uint32(0); g < quicGens; g++ {
			if m.obj.sockets.Lookup(g, &cookie) == nil {
				return nil
			}
		}
	}
	err := errors.Join(unpinQUIC(m.dir), os.Remove(m.dir))
	os.Remove(filepath.Dir(m.dir)) // the netns directory, if now empty
	return err
}

// inspectUDP reads the address and cookie of a bound UDP socket.
func inspectUDP(c syscall.Conn) (netip.AddrPort, uint64, error) {
	s, err := reuseport.ReadSocket(c)
	if err != nil {
		return netip.AddrPort{}, 0, err
	}
	if s.Type != unix.SOCK_DGRAM || s.Protocol != unix.IPPROTO_UDP {
		return s.Addr, 0, fmt.Errorf("%w: %s socket, want UDP", reuseport.ErrNotSupported, s.Network())
	}
	if s.Addr.Port() == 0 {
		return s.Addr, 0, fmt.Errorf("UDP socket not bound: %w", unix.EINVAL)
	}
	return s.Addr, s.Cookie, nil
}
