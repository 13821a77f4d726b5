package quicdrain

import (
	"context"
	"errors"
	"fmt"

	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// SteerLayout is where package steer's QUIC program finds the generation in
// the connection IDs a Gen issues.
var SteerLayout = steer.QUIC{CIDLen: CIDLen, GenOffset: CIDGenOffset}

// ErrNotSteered is returned by Steer for a generation made by Listen or New:
// it shares its socket with the other generations, which the kernel cannot
// tell apart.
var ErrNotSteered = errors.New("quicdrain: generation not made by ListenSteered")

// ListenSteered returns generation gen (at least 1) over a UDP socket of its
// own on address, with SO_REUSEPORT (reuseport.ListenPacket): beside the
// sockets of the generations before it, in the same reuseport group. Once
// its server listens on Transport (ServeHTTP3), call Start (it waits for no
// handover) and then Steer: the kernel gives it the datagrams of its own
// connections and every new one, and gives the older generations theirs on
// their own sockets. Nothing is forwarded between processes and nothing
// handed over; Handover does nothing, so HTTP3.Shutdown only drains. The
// Gen owns its socket; Config.Dir is still required (the generation binds
// its forwarding socket there, unused).
//
// The kernel minimum and the capabilities are Steer's.
func ListenSteered(ctx context.Context, network, address string, gen uint64, cfg Config) (*Gen, error) {
	pc, err := reuseport.ListenPacket(ctx, network, address)
	if err != nil {
		return nil, err
	}
	g, err := New(pc.UDPConn, gen, cfg)
	if err != nil {
		pc.Close()
		return nil, err
	}
	g.steered = true
	return g, nil
}

// Steer puts g's socket in the QUIC steering group of its address as the
// newest generation (steer.Config.JoinQUIC with SteerLayout). Close the
// member after g (after HTTP3.Shutdown). A successor that gives up closes
// its member first: the generation before it is the newest again.
//
// Linux 5.14+; needs CAP_BPF and CAP_NET_ADMIN (or root) and a bpf
// filesystem at sc.Dir (errors matching steer.ErrPermission,
// steer.ErrNoBPFFS): see package steer, section QUIC.
func (g *Gen) Steer(ctx context.Context, sc *steer.Config) (*steer.QUICMember, error) {
	if !g.steered {
		return nil, fmt.Errorf("steer generation %d: %w", g.gen, ErrNotSteered)
	}
	return sc.JoinQUIC(ctx, g.udp, g.gen, SteerLayout)
}
