// Package worker is the server side of cmd/contenders: every server the
// benchmark restarts is a process running Main, with the mode and its
// parameters in the environment. It links only what servers need (no
// plotting), so that cmd/zdworker, the lean binary the harness runs its
// workers from, starts as fast as a real service binary would.
package worker

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// The environment of a worker process: a binary that calls Main, run with
// EnvRole set, runs a server instead of what it would otherwise do.
const (
	EnvRole = "ZD_BENCH_WORKER" // the worker mode, a key of modes
	EnvAddr = "ZD_BENCH_ADDR"   // the address to serve
	EnvGen  = "ZD_BENCH_GEN"    // the generation, sent back in X-Generation
	EnvDir  = "ZD_BENCH_DIR"    // a private directory (pid files, sockets)
	EnvBPF  = "ZD_BENCH_BPF"    // a bpf filesystem for pins, or ""
	EnvCPU  = "ZD_BENCH_CPU"    // the worker's SO_INCOMING_CPU (mode "cpu")

	// EnvTLSCert and EnvTLSKey, when set, name the PEM files of the
	// certificate and key every mode then serves HTTPS with (HTTP/2 offered
	// by ALPN, net/http's default over TLS).
	EnvTLSCert = "ZD_BENCH_TLS_CERT"
	EnvTLSKey  = "ZD_BENCH_TLS_KEY"

	// EnvListenPIDSelf, when set, has a systemd worker set LISTEN_PID to its
	// own pid before it reads LISTEN_FDS. systemd sets it in the child
	// between fork and exec; os/exec cannot, and a shell that exports $$
	// and execs the worker costs one more exec (3-4 ms here) that a service
	// started by systemd does not pay.
	EnvListenPIDSelf = "ZD_BENCH_LISTEN_PID_SELF"

	// EnvTrace, when set (in the harness's environment, which workers
	// inherit), has every Go worker log the connections net/http closes
	// before they sent a request.
	EnvTrace = "ZD_BENCH_TRACE"

	// EnvCloseSpread, when set, is the drain.Server.CloseSpread of the
	// zerodrop workers serving TLS (a time.ParseDuration string; "0" for
	// none), instead of DefaultCloseSpread.
	EnvCloseSpread = "ZD_BENCH_CLOSE_SPREAD"

	// EnvReports, when set (in the harness's environment), has every
	// zerodrop worker log each drain report, not only the notable ones.
	EnvReports = "ZD_BENCH_REPORTS"
)

// DefaultCloseSpread is the drain.Server.CloseSpread of the zerodrop
// workers serving TLS: their keep-alive clients' reconnections, each a full
// handshake, are spread over it (see BENCHMARKS.md).
const DefaultCloseSpread = 500 * time.Millisecond

// ShutdownTimeout bounds a worker's graceful shutdown.
const ShutdownTimeout = 5 * time.Second

// Mode is a server a worker process can run. It serves until ctx ends
// (SIGTERM or SIGINT), then shuts down its way.
type Mode func(ctx context.Context, w *Worker) error

// modes are the worker modes this binary can run: those of this package, and
// those Registered by the packages it links (internal/worker/steer and
// internal/worker/tableflip, kept apart so that a worker that does not need
// their dependencies does not pay their package init at every start).
var modes = map[string]Mode{
	"plain":     servePlain,
	"reuseport": serveReuseport,
	"drain":     serveDrain,
	"handoff":   serveHandoff,
	"systemd":   serveSystemd,
	"cpu":       serveCPU,
}

// Register adds a worker mode. Call it from an init function.
func Register(name string, m Mode) { modes[name] = m }

// Worker is what a worker mode gets from its environment.
type Worker struct {
	Addr, Gen, Dir string
	Sigs           chan os.Signal // every signal but SIGTERM and SIGINT
	// CertFile and KeyFile, if set (EnvTLSCert, EnvTLSKey), make the
	// worker serve HTTPS.
	CertFile, KeyFile string
	// CloseSpread is drain.Server.CloseSpread over TLS (EnvCloseSpread,
	// or DefaultCloseSpread).
	CloseSpread time.Duration
	tl          *timeline // EnvTimeline, or nil
}

// Main runs the worker mode named by EnvRole and exits, or returns if this
// process is not a worker. Call it first in main (and TestMain).
func Main() {
	mode := os.Getenv(EnvRole)
	if mode == "" {
		return
	}
	serve, ok := modes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "worker: unknown mode %q\n", mode)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	w := &Worker{Addr: os.Getenv(EnvAddr), Gen: os.Getenv(EnvGen), Dir: os.Getenv(EnvDir),
		Sigs: make(chan os.Signal, 1), CertFile: os.Getenv(EnvTLSCert), KeyFile: os.Getenv(EnvTLSKey), tl: newTimeline()}
	if w.Gen == "" {
		w.Gen = strconv.Itoa(os.Getpid()) // processes that upgrade themselves
	}
	w.CloseSpread = DefaultCloseSpread
	if v := os.Getenv(EnvCloseSpread); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "worker: %s=%q: want a duration, 0 or more\n", EnvCloseSpread, v)
			os.Exit(2)
		}
		w.CloseSpread = d
	}
	signal.Notify(w.Sigs, syscall.SIGHUP, syscall.SIGUSR2)
	err := serve(ctx, w)
	stop()
	w.logHandshakes()
	if w.tl != nil {
		w.tl.log(w.Gen)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %s gen %s: %v\n", mode, w.Gen, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Ready tells the parent that this process serves: "ready <pid> <gen>" on
// stdout, which the parent reads line by line.
func (w *Worker) Ready() {
	if w.tl != nil {
		w.tl.mark(&w.tl.ready)
	}
	fmt.Printf("ready %d %s\n", os.Getpid(), w.Gen)
}

// Stopping notes, for EnvTimeline, that the worker's stop begins.
func (w *Worker) Stopping() {
	if w.tl != nil {
		w.tl.mark(&w.tl.stop)
	}
}

// handler answers every request, GET or POST, with "ok" and the worker's
// generation, having read and discarded the request's body.
func (w *Worker) handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rw.Header().Set("X-Generation", w.Gen)
		rw.Write([]byte("ok\n"))
	})
}

// NewServer returns the plain http.Server every Go contender runs.
func (w *Worker) NewServer() *http.Server {
	srv := &http.Server{Handler: w.handler(), ReadHeaderTimeout: 5 * time.Second}
	if os.Getenv(EnvTrace) != "" {
		srv.ConnState = newConnTrace(w).state
	}
	if w.TLS() {
		srv.TLSConfig = &tls.Config{}
		if w.tl != nil {
			srv.TLSConfig = w.tl.tlsConfig()
			srv.Handler = w.tl.handler(srv.Handler)
		}
		countHandshakes(srv.TLSConfig)
	}
	return srv
}

// connTrace logs, on stderr, every connection net/http closes without having
// read a byte of a request from it, with the socket's TCP state and unread
// bytes at accept: with EnvTrace set, to find who closes a fresh connection
// (a client's "unexpected EOF"). It costs a lock and two syscalls per
// connection, so it is off in measured runs.
type connTrace struct {
	w     *Worker
	mu    sync.Mutex
	fresh map[net.Conn]freshConn // connections that have not been active yet
}

type freshConn struct {
	at    time.Time
	state string // TCP_INFO state and SIOCINQ at StateNew
}

func newConnTrace(w *Worker) *connTrace {
	return &connTrace{w: w, fresh: make(map[net.Conn]freshConn)}
}

func (t *connTrace) state(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateNew:
		t.fresh[c] = freshConn{at: time.Now(), state: socketState(c)}
	case http.StateActive, http.StateHijacked:
		delete(t.fresh, c)
	case http.StateClosed:
		if f, ok := t.fresh[c]; ok {
			delete(t.fresh, c)
			fmt.Fprintf(os.Stderr, "trace %d gen %s: closed without a request: %s after %v, at %s; at accept: %s\n",
				os.Getpid(), t.w.Gen, c.RemoteAddr(), time.Since(f.at), time.Now().UTC().Format("15:04:05.000000"), f.state)
		}
	}
}

// socketState says the TCP state (1 established, 5 FIN_WAIT2, 8 CLOSE_WAIT:
// include/net/tcp_states.h) and the unread bytes of a TCP connection.
func socketState(c net.Conn) string {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return "?"
	}
	var st string
	err := linux.Control(sc, func(fd int) error {
		ti, err := linux.TCPInfo(fd)
		if err != nil {
			return err
		}
		n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
		st = fmt.Sprintf("state %d, %d bytes unread", ti.State, n)
		return err
	})
	if err != nil {
		return err.Error()
	}
	return st
}

// TLS reports whether the worker serves HTTPS.
func (w *Worker) TLS() bool { return w.CertFile != "" }

// Serve serves ln with srv: srv.Serve, or srv.ServeTLS with the worker's
// certificate (HTTP/2 offered by ALPN) if it serves HTTPS.
func (w *Worker) Serve(srv *http.Server, ln net.Listener) error {
	if w.TLS() {
		return srv.ServeTLS(ln, w.CertFile, w.KeyFile)
	}
	return srv.Serve(ln)
}

// serveUntil serves ln with a plain http.Server until ctx ends, then calls
// Shutdown, as most Go servers do.
func (w *Worker) serveUntil(ctx context.Context, ln net.Listener) error {
	srv := w.NewServer()
	done := make(chan error, 1)
	go func() { done <- w.Serve(srv, ln) }()
	w.Ready()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	w.Stopping()
	return Shutdown(srv, done)
}

// Shutdown calls srv.Shutdown, bounded by ShutdownTimeout, and waits for
// Serve (whose result done carries) to return.
func Shutdown(srv *http.Server, done <-chan error) error {
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-done
	return err
}

// servePlain listens with net.Listen, as most Go programs do (Go 1.24+ makes
// it an MPTCP socket; the load's clients are plain TCP).
func servePlain(ctx context.Context, w *Worker) error {
	ln, err := net.Listen("tcp", w.Addr)
	if err != nil {
		return err
	}
	return w.serveUntil(ctx, ln)
}

// serveReuseport listens the way most Go code bases do with SO_REUSEPORT: a
// net.ListenConfig whose Control sets the option (Go's defaults otherwise,
// so MPTCP since Go 1.24), and shuts down like any Go server:
// http.Server.Shutdown.
func serveReuseport(ctx context.Context, w *Worker) error {
	lc := net.ListenConfig{Control: setReusePort}
	ln, err := lc.Listen(ctx, "tcp", w.Addr)
	if err != nil {
		return err
	}
	return w.serveUntil(ctx, ln)
}

// setReusePort is the Control function found in most code bases.
func setReusePort(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt SO_REUSEPORT", serr)
}
