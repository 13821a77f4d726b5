// Package quicworker adds the worker mode "quic" (HTTP/3 with quic-go) to the
// binaries that link it: cmd/contenders and cmd/zdworker-quic. It is apart so
// that other workers do not link quic-go.
//
// EnvVariant picks how the server restarts:
//
//   - "zerodrop": a quicdrain generation on the UDP socket of a handoff
//     (quicdrain.Listen, quicdrain.ServeHTTP3): the successor reads the socket
//     and forwards its predecessor's datagrams to it, which sends its
//     clients a GOAWAY and exits once they left (or at the grace);
//   - "pass": the socket-passing control, what users do today: the socket
//     comes from the handoff and the successor starts quic-go on it (with a
//     fixed stateless reset key, as quic-go recommends); the predecessor
//     shuts its http3.Server down gracefully once the successor serves;
//   - "plain": quic-go on a socket of its own (the naive restart: stop,
//     then start), the same reset key;
//   - "reuseport": quic-go on a socket of its own with SO_REUSEPORT, one of
//     a pool of such workers on the port, the same reset key.
//
// With EnvSlot set, the zerodrop and pass variants are slot i of a pool:
// their handoff socket and forwarding directory are the slot's, so each slot
// is a lineage of its own whose UDP socket, one of the port's reuseport
// group, passes from generation to generation (the group never changes).
//
// Every variant serves with the worker's certificate (EnvTLSCert, required)
// and prints, as it exits, "quic <pid> <forwarded> <told> <finished>
// <forced> <why>": the datagrams its successor forwarded to it, and its
// connections told to go away, finished and forced (zeros but for
// "zerodrop"); why is "successor" when a successor took over, "stop" when
// the harness stopped it (SIGTERM). Every variant's shutdown is bounded by
// Grace.
package quicworker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop/bench/internal/worker"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/quicdrain"
	"github.com/zerodrop/zerodrop/reuseport"
)

// EnvVariant is the restart of the "quic" mode: "zerodrop", "pass" or
// "plain".
const EnvVariant = "ZD_BENCH_QUIC"

// EnvSlot, when set, is the worker's slot in a pool (see the package doc).
const EnvSlot = "ZD_BENCH_QUIC_SLOT"

// recvBuffer is the UDP receive buffer of every variant: quic-go may not
// resize a handed-over socket (the handoff would refuse a socket whose
// options changed), so it is sized here for the load's bursts.
const recvBuffer = 2 << 20

// resetKey is the fixed stateless reset key of the quic-go servers of the
// controls: quic-go recommends one that survives restarts.
var resetKey = quic.StatelessResetKey{1, 2, 3}

// Grace bounds a quic worker's shutdown (GOAWAY, then its clients' leave),
// below worker.ShutdownTimeout so that the socket-passing control, whose
// predecessor waits for clients its successor reset, restarts within the
// run's time.
const Grace = 2 * time.Second

func init() { worker.Register("quic", serveQUIC) }

func serveQUIC(ctx context.Context, w *worker.Worker) error {
	if !w.TLS() {
		return errors.New("quic: HTTP/3 needs the worker's certificate (ZD_BENCH_TLS_CERT)")
	}
	cert, err := tls.LoadX509KeyPair(w.CertFile, w.KeyFile)
	if err != nil {
		return err
	}
	hs := w.NewServer() // the handler, and a TLS config that counts handshakes
	hs.TLSConfig.Certificates = []tls.Certificate{cert}
	srv := &http3.Server{Handler: hs.Handler, TLSConfig: http3.ConfigureTLSConfig(hs.TLSConfig)}
	var r report
	switch v := os.Getenv(EnvVariant); v {
	case "zerodrop":
		err = serveZerodrop(ctx, w, srv, &r)
	case "pass":
		err = servePass(ctx, w, srv)
	case "plain":
		err = servePlain(ctx, w, srv, false)
	case "reuseport":
		err = servePlain(ctx, w, srv, true)
	default:
		err = fmt.Errorf("quic: %s=%q: want zerodrop, pass, plain or reuseport", EnvVariant, v)
	}
	why := "successor"
	if ctx.Err() != nil {
		why = "stop"
	}
	fmt.Printf("quic %d %d %d %d %d %s\n", os.Getpid(), r.Stats.Forwarded, r.Told, r.Finished, r.Forced, why)
	return err
}

type report = quicdrain.Report

// slotPath returns w.Dir/name, suffixed with the worker's slot if it has
// one (EnvSlot).
func slotPath(w *worker.Worker, name string) string {
	if s := os.Getenv(EnvSlot); s != "" {
		name += "-" + s
	}
	return filepath.Join(w.Dir, name)
}

// handoffConfig is the handoff of the zerodrop and pass variants.
func handoffConfig(w *worker.Worker) handoff.Config {
	return handoff.Config{Path: slotPath(w, "handoff.sock"),
		Listen: reuseport.Config{Options: reuseport.Options{RecvBuffer: recvBuffer}}}
}

// serveZerodrop serves a quicdrain generation until a successor is ready
// (or ctx ends), then shuts it down, bounded by Grace.
func serveZerodrop(ctx context.Context, w *worker.Worker, srv *http3.Server, r *report) error {
	u, err := handoff.New(ctx, handoffConfig(w))
	if err != nil {
		return err
	}
	defer u.Close()
	w.Gen = "q" + strconv.FormatUint(u.Generation(), 10)
	fwd := slotPath(w, "fwd")
	if err := os.MkdirAll(fwd, 0o700); err != nil {
		return err
	}
	g, err := quicdrain.Listen(ctx, u, "h3", "udp", w.Addr, quicdrain.Config{Dir: fwd, HandoverTimeout: worker.ShutdownTimeout})
	if err != nil {
		return err
	}
	h3, err := quicdrain.ServeHTTP3(g, srv)
	if err != nil {
		g.Close()
		return err
	}
	if err := u.Ready(); err != nil {
		g.Close()
		return err
	}
	if err := g.Start(ctx); err != nil {
		g.Close()
		return err
	}
	w.Ready()
	select {
	case <-u.Exit():
	case <-ctx.Done():
	}
	w.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), Grace)
	defer cancel()
	*r = h3.Shutdown(sctx)
	return nil
}

// servePass serves quic-go on the handed-over socket until a successor is
// ready (or ctx ends), then shuts its http3.Server down.
func servePass(ctx context.Context, w *worker.Worker, srv *http3.Server) error {
	u, err := handoff.New(ctx, handoffConfig(w))
	if err != nil {
		return err
	}
	defer u.Close()
	w.Gen = "p" + strconv.FormatUint(u.Generation(), 10)
	pc, err := u.ListenPacket(ctx, "h3", "udp", w.Addr)
	if err != nil {
		return err
	}
	defer pc.Close()
	return serveOn(ctx, w, srv, fixedBuffers{pc}, u.Ready, u.Exit())
}

// servePlain serves quic-go on a socket of its own, with SO_REUSEPORT if
// shared, until ctx ends.
func servePlain(ctx context.Context, w *worker.Worker, srv *http3.Server, shared bool) error {
	var pc net.PacketConn
	var err error
	if shared {
		pc, err = reuseport.ListenPacket(ctx, "udp", w.Addr)
	} else {
		var lc net.ListenConfig // quic-go sizes its buffers itself
		pc, err = lc.ListenPacket(ctx, "udp", w.Addr)
	}
	if err != nil {
		return err
	}
	defer pc.Close()
	return serveOn(ctx, w, srv, pc, func() error { return nil }, nil)
}

// serveOn serves srv with quic-go on pc, calls ready, and once stop closes
// (or ctx ends) shuts srv down, bounded by Grace.
func serveOn(ctx context.Context, w *worker.Worker, srv *http3.Server, pc net.PacketConn, ready func() error, stop <-chan struct{}) error {
	tr := &quic.Transport{Conn: pc, StatelessResetKey: &resetKey}
	defer tr.Close()
	ln, err := tr.ListenEarly(srv.TLSConfig, srv.QUICConfig)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeListener(ln) }()
	if err := ready(); err != nil {
		srv.Close()
		<-done
		return err
	}
	w.Ready()
	select {
	case <-stop:
	case <-ctx.Done():
	case err := <-done:
		return err
	}
	w.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), Grace)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil // clients that did not leave within the grace: closed
	}
	return err
}

// fixedBuffers keeps quic-go from resizing the handed-over socket's buffers
// (it does through SyscallConn, with SO_RCVBUFFORCE as root): the handoff
// would refuse a socket whose options changed since it was declared.
type fixedBuffers struct{ net.PacketConn }
