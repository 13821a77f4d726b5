package quicdrain_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	quicdrain "github.com/zerodrop/zerodrop/quicdrain"
	"github.com/zerodrop/zerodrop/reuseport"
	"testing"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("h3gen", helperMain(h3gen))
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// The timeouts of the restart tests bound a hang, not a speed: on a loaded
// machine (and with -race) 200 connections' handshakes take seconds.
const (
	idleTimeout = 30 * time.Second // server and clients
	// a successor's wait for the predecessor's handover (default 2 s)
	handoverTimeout = 30 * time.Second
	grace           = 45 * time.Second // a generation's HTTP3.Shutdown (under netnstest.Expect's 60 s)
)

// Environment of the "h3gen" helper.
const (
	envHandoff = "ZD_HANDOFF" // handoff socket
	envAddr    = "ZD_ADDR"    // UDP address
	envDir     = "ZD_DIR"     // forwarding sockets
	envCert    = "ZD_CERT"    // PEM files
	envKey     = "ZD_KEY"
	// ZD_MODE: "zerodrop" (default) or "naive": the successor runs quic-go
	// on the inherited socket, as users do today (with a fixed stateless
	// reset key, as quic-go recommends).
	envMode = "ZD_MODE"
)

// helperMain is the main of a helper process that runs run: on an error,
// it prints "error <the error on one line>" and exits with status 1.
func helperMain(run func() error) func() {
	return func() {
		if err := run(); err != nil {
			fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			os.Exit(1)
		}
	}
}

// h3Server is the HTTP/3 server of a helper generation, with the
// certificate of envCert and envKey and the QUIC configuration qc: it
// answers each POST with "gen <gen()> <body length>".
func h3Server(gen func() uint64, qc *quic.Config) (*http3.Server, error) {
	cert, err := tls.LoadX509KeyPair(os.Getenv(envCert), os.Getenv(envKey))
	if err != nil {
		return nil, err
	}
	return &http3.Server{
		TLSConfig:  http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
		QUICConfig: qc,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				return
			}
			handled.Add(1)
			fmt.Fprintf(w, "gen %d %d", gen(), n)
		}),
	}, nil
}

// handled counts the requests this helper process read whole and began to
// answer (report field "handled"): the restart tests check that their
// clients received exactly as many answers from the generation.
var handled atomic.Int64

// successorCmd is the command of a helper's successor: this process's
// command, with its output, and env added to its environment.
func successorCmd(env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}

// h3gen is one generation of an HTTP/3 server (the "h3gen" helper): it
// answers each POST with "gen <generation> <body length>". On SIGHUP it
// starts its successor (the same command); once that one is ready it
// stops. It prints "ready <generation> <pid>" and, at the end, "report
// <generation> <json of quicdrain.Report>" (zerodrop) or "report
// <generation> naive".
func h3gen() error {
	ctx := context.Background()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	var gen atomic.Uint64
	srv, err := h3Server(gen.Load, &quic.Config{MaxIdleTimeout: idleTimeout, HandshakeIdleTimeout: idleTimeout, Tracer: refusals.tracer})
	if err != nil {
		return err
	}
	if os.Getenv(envMode) == "serve" {
		return serve(ctx, srv, &gen)
	}
	// quic-go may not resize the socket's buffers (see fixedBuffers): size
	// the receive buffer here, or a burst overflows it and clients' packets
	// are lost (QUIC resends them; a lost CONNECTION_CLOSE is not).
	u, err := handoff.New(ctx, handoff.Config{Path: os.Getenv(envHandoff), Listen: reuseport.Config{Options: reuseport.Options{RecvBuffer: 2 << 20}}})
	if err != nil {
		return err
	}
	defer u.Close()
	gen.Store(u.Generation())
	if os.Getenv(envMode) == "naive" {
		return naive(ctx, u, srv, hup)
	}
	g, err := quicdrain.Listen(ctx, u, "h3", "udp", os.Getenv(envAddr), quicdrain.Config{Dir: os.Getenv(envDir), HandoverTimeout: handoverTimeout})
	if err != nil {
		return err
	}
	h3, err := quicdrain.ServeHTTP3(g, srv)
	if err != nil {
		return err
	}
	if err := u.Ready(); err != nil {
		return err
	}
	if err := g.Start(ctx); err != nil {
		return err
	}
	fmt.Printf("ready %d %d\n", gen.Load(), os.Getpid())
	if err := waitSuccessor(u, hup); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	refusals.draining.Store(true)
	rep := h3.Shutdown(sctx)
	fmt.Printf("report %d %s refused=%d refused_draining=%d\n", gen.Load(), reportJSON(rep), refusals.serving.Load(), refusals.drain.Load())
	return nil
}

// serve is the generation run by quicdrain.Serve: HTTP/1 and HTTP/2 over
// TCP and HTTP/3 over UDP on the same port; SIGHUP starts the successor
// (zerodrop.Config.Successor).
func serve(ctx context.Context, srv *http3.Server, gen *atomic.Uint64) error {
	hs := &http.Server{Handler: srv.Handler, TLSConfig: srv.TLSConfig.Clone()}
	hs.TLSConfig.NextProtos = nil
	rep, err := quicdrain.Serve(ctx, hs, []string{os.Getenv(envAddr)}, quicdrain.ServeOptions{
		Config: zerodrop.Config{Grace: grace,
			Handoff: handoff.Config{Path: os.Getenv(envHandoff), Listen: reuseport.Config{Options: reuseport.Options{RecvBuffer: 2 << 20}}},
			Successor: func() *exec.Cmd {
				cmd := exec.Command(os.Args[0], os.Args[1:]...)
				cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
				return cmd
			},
			OnListen: func(g uint64, _ []net.Addr) { gen.Store(g) },
			OnServing: func(g uint64, _ []net.Addr) {
				fmt.Printf("ready %d %d\n", g, os.Getpid())
			}},
		Gen:  quicdrain.Config{Dir: os.Getenv(envDir), HandoverTimeout: handoverTimeout},
		QUIC: srv.QUICConfig,
	})
	if err != nil {
		return err
	}
	fmt.Printf("report %d %s cause=%s\n", gen.Load(), reportJSON(rep.HTTP3[0]), strings.ReplaceAll(rep.Cause, " ", "_"))
	return nil
}

// naive is what users do today: quic-go's http3 server on the inherited
// socket; the predecessor shuts down gracefully once the successor is ready.
func naive(ctx context.Context, u *handoff.Upgrader, srv *http3.Server, hup chan os.Signal) error {
	pc, err := u.ListenPacket(ctx, "h3", "udp", os.Getenv(envAddr))
	if err != nil {
		return err
	}
	key := quic.StatelessResetKey{1, 2, 3}
	tr := &quic.Transport{Conn: fixedBuffers{pc}, StatelessResetKey: &key}
	ln, err := tr.Listen(srv.TLSConfig, srv.QUICConfig)
	if err != nil {
		return err
	}
	if err := u.Ready(); err != nil {
		return err
	}
	go srv.ServeListener(ln)
	fmt.Printf("ready %d %d\n", u.Generation(), os.Getpid())
	if err := waitSuccessor(u, hup); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	srv.Shutdown(sctx)
	tr.Close()
	pc.Close()
	fmt.Printf("report %d naive\n", u.Generation())
	return nil
}

// fixedBuffers keeps quic-go from resizing the socket's buffers (it does
// through SyscallConn, with SO_RCVBUFFORCE as root): the handoff would
// refuse a socket whose options changed since it was declared.
type fixedBuffers struct{ net.PacketConn }

// waitSuccessor starts a successor at each SIGHUP and returns once one is
// ready.
func waitSuccessor(u *handoff.Upgrader, hup chan os.Signal) error {
	for {
		select {
		case <-hup:
			cmd := successorCmd()
			if err := cmd.Start(); err != nil {
				return err
			}
			cmd.Process.Release()
		case <-u.Exit():
			return nil
		}
	}
}
