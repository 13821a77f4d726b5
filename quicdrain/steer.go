package quicdrain

import (
	"context"
	"syscall"

	"github.com/zerodrop/zerodrop/reuseport"
)

// ListenSteered returns generation gen (at least 1) over a UDP socket of its
// own on address, with SO_REUSEPORT (reuseport.ListenPacket): beside the
// sockets of the generations before it, in the same reuseport group, for a
// kernel program to route between them (package
// github.com/zerodrop/zerodrop/reuseport/steer, Config.JoinQUIC). Such a
// generation forwards nothing and hands nothing over: Start waits for no
// predecessor, Handover does nothing, so HTTP3.Shutdown only drains. The Gen
// owns its socket; Config.Dir is still required (the generation binds its
// forwarding socket there, unused).
//
// Once its server listens on Transport (ServeHTTP3), call Start, then put
// the socket in the steering group as the newest generation:
//
//	g, _ := quicdrain.ListenSteered(ctx, "udp", ":443", gen, quicdrain.Config{Dir: dir})
//	h3, _ := quicdrain.ServeHTTP3(g, srv)
//	g.Start(ctx)
//	layout := steer.QUIC{CIDLen: quicdrain.CIDLen, GenOffset: quicdrain.CIDGenOffset}
//	m, _ := (&steer.Config{}).JoinQUIC(ctx, g, g.Generation(), layout)
//	// ... at the successor's signal:
//	h3.Shutdown(gctx)
//	m.Close()
//
// The kernel then gives g the datagrams of its own connections and every
// new one, and the older generations theirs on their own sockets: nothing
// crosses processes. Routing needs Linux 5.14+, CAP_BPF and CAP_NET_ADMIN
// (or root) and a bpf filesystem: see package steer, section QUIC. This
// package does not import steer (nor cilium/ebpf).
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

// SyscallConn returns the raw connection of g's UDP socket (shared with the
// other generations, or its own for ListenSteered), for socket options and
// for package steer. g keeps owning the socket.
func (g *Gen) SyscallConn() (syscall.RawConn, error) { return g.udp.SyscallConn() }
