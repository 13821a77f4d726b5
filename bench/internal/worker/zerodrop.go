package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
)

// serveDrain is a reuseport worker (migration required) stopped by
// drain.Server: the listener stops first, its queue migrating to the
// siblings, every accepted request is served, then Shutdown.
func serveDrain(ctx context.Context, w *Worker) error {
	cfg := reuseport.Config{Migration: reuseport.MigrationRequire, SkipUIDCheck: true}
	ln, err := cfg.Listen(ctx, "tcp", w.Addr)
	if err != nil {
		return err
	}
	return w.servePooled(ln, ctx.Done())
}

// serveCPU is a reuseport worker with SO_INCOMING_CPU set to EnvCPU (the
// pool gives each CPU two workers), tcp_migrate_req=0, stopped by
// drain.Server with StepOut: it steps out of the group's pick, waits out its
// handshakes, accepts what is queued, and shuts down.
func serveCPU(ctx context.Context, w *Worker) error {
	cpu, err := strconv.Atoi(os.Getenv(EnvCPU))
	if err != nil {
		return fmt.Errorf("%s: %w", EnvCPU, err)
	}
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, SkipUIDCheck: true, Options: reuseport.Options{IncomingCPU: &cpu}}
	ln, err := cfg.Listen(ctx, "tcp", w.Addr)
	if err != nil {
		return err
	}
	return w.servePooled(ln, ctx.Done(), drain.Options{StepOut: true, OnReport: logNotStepOut})
}

// EnvNoPool, when set (in the harness's environment), keeps the pool
// workers (modes drain and cpu) out of the pool directory: at its stop, a
// worker closes its keep-alive connections (IdleGrace) instead of passing
// them to a sibling, as before the pool existed.
const EnvNoPool = "ZD_BENCH_NO_POOL"

// servePooled serves ln as a member of a SO_REUSEPORT pool (the drain
// options opts[0] if given) that, unless EnvNoPool or over TLS, joins the
// pool directory <Dir>/pool (handoff.JoinPool): the connections its
// siblings pass at their stop are served here, and at its own stop its
// keep-alive connections go to the newest sibling (drain.Server.HandOver,
// handoff.Pool.PassConns), each once it waits for its next request, so that
// its clients do not reconnect. This is how a worker that builds its own
// listener and drain.Server joins a pool through the public API.
func (w *Worker) servePooled(ln net.Listener, stop <-chan struct{}, opts ...drain.Options) error {
	ds := w.drainServer(opts...)
	if w.TLS() || os.Getenv(EnvNoPool) != "" {
		return w.serveDrainedBy(ds, ln, func() error { return nil }, stop)
	}
	dir := filepath.Join(w.Dir, "pool")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		ln.Close()
		return err
	}
	pool, err := handoff.JoinPool(dir, handoff.ConnsConfig{Addrs: map[string]net.Addr{poolName: ln.Addr()}},
		map[string]func(handoff.PassedConn){poolName: func(pc handoff.PassedConn) { ds.ServeConn(pc.Conn, pc.State) }})
	if err != nil {
		ln.Close()
		return err
	}
	defer pool.Close()
	ds.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
		if conns == nil { // the stop begins: siblings stopping now pick another
			pool.StopListening()
		}
		pcs := make([]handoff.PassedConn, len(conns))
		for i, d := range conns {
			pcs[i] = handoff.PassedConn{Conn: d.Conn, State: d.Unread}
		}
		return pool.PassConns(ctx, poolName, pcs)
	}
	return w.serveDrainedBy(ds, ln, func() error { return nil }, stop)
}

// EnvHandOverBatch, when set (in the harness's environment), is every
// zerodrop worker's drain.Server.HandOverBatch (1024: every idle
// connection in one batch, as before the field existed).
const EnvHandOverBatch = "ZD_BENCH_HANDOVER_BATCH"

// poolName names a pool worker's listener to its siblings.
const poolName = "http"

// serveHandoff inherits its listener from its predecessor over the handoff
// socket (or creates it, the first time), serves, calls Ready, and drains
// once its successor is ready. Its keep-alive connections go to the
// successor too, as zerodrop.Serve passes them: the drain hands each over
// once it waits for its next request (drain.Server.HandOver, with
// handoff.Upgrader.PassConns), and the connections the predecessor passes
// are served here (HandleConns, registered before Ready). The socket itself
// never closes.
//
// With EnvTickets (over TLS), its session-ticket keys go to the successor
// too (handoff.Config.TicketKeys), installed into its TLS config.
// With EnvTLSHandOver (over TLS), its idle TLS 1.3 keep-alive connections
// go to the successor with their session (drain.Server.TLSHandOver), as
// zerodrop.Options.TLSHandoff passes them; without it no TLS connection is
// handed over.
func serveHandoff(ctx context.Context, w *Worker) error {
	cfg := handoff.Config{Path: filepath.Join(w.Dir, "handoff.sock")}
	if w.TLS() && os.Getenv(EnvTickets) != "" {
		keys, err := ticket.New()
		if err != nil {
			return err
		}
		defer keys.Close()
		cfg.TicketKeys = keys
	}
	u, err := handoff.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer u.Close()
	w.Gen = "h" + strconv.FormatUint(u.Generation(), 10)
	ln, err := u.Listen(ctx, handoffName, "tcp", w.Addr)
	if err != nil {
		return err
	}
	ds := w.drainServer()
	if cfg.TicketKeys != nil {
		if err := cfg.TicketKeys.Install(ds.HTTP.TLSConfig); err != nil {
			ln.Close()
			return err
		}
	}
	// TLS connections are handed over only with EnvTLSHandOver
	// (drain.Server.TLSHandOver: idle TLS 1.3 HTTP/1.1 ones, with their
	// session); otherwise over TLS the predecessor drains them.
	tlsHandOver := w.TLS() && os.Getenv(EnvTLSHandOver) != ""
	if !w.TLS() || tlsHandOver {
		ds.HandOver = handOver(u, handoffName)
		ds.TLSHandOver = tlsHandOver
		if err := u.HandleConns(handoffName, func(pc handoff.PassedConn) { ds.ServeConn(pc.Conn, pc.State) }); err != nil {
			ln.Close()
			return err
		}
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-u.Exit():
		case <-ctx.Done():
		}
		close(stop)
	}()
	return w.serveDrainedBy(ds, ln, u.Ready, stop)
}

// handoffName names the handoff worker's listener to its successor.
const handoffName = "http"

// handOver is a drain.Server.HandOver that passes the connections of the
// listener name to a successor that takes them, as zerodrop.Serve's does.
func handOver(u *handoff.Upgrader, name string) func(context.Context, []drain.Detached) (int, error) {
	return func(ctx context.Context, conns []drain.Detached) (int, error) {
		if !u.TakesConns(name) {
			return 0, fmt.Errorf("no successor takes the connections of %s: %w", name, handoff.ErrNotTaken)
		}
		pcs := make([]handoff.PassedConn, len(conns))
		for i, d := range conns {
			pcs[i] = handoff.PassedConn{Listener: name, Conn: d.Conn, State: d.Unread}
		}
		return u.PassConns(ctx, pcs)
	}
}

// serveSystemd is a service restarted by systemd with its listener in the fd
// store: it takes the listener from LISTEN_FDS (or creates it, the first
// time), stores it (FDSTORE=1), says READY=1, and on SIGTERM drains with
// drain.Server, which closes only its own reference.
func serveSystemd(ctx context.Context, w *Worker) error {
	if os.Getenv(EnvListenPIDSelf) != "" {
		os.Setenv(systemd.EnvListenPID, strconv.Itoa(os.Getpid()))
	}
	act, err := systemd.Activated()
	if err != nil {
		return err
	}
	cfg := &reuseport.Config{Migration: reuseport.MigrationIgnore, SkipUIDCheck: true}
	var ln net.Listener
	if act == nil {
		ln, err = cfg.Listen(ctx, "tcp", w.Addr)
	} else {
		defer act.Close()
		ln, err = act.Listener(ctx, "http", "tcp", "", cfg)
	}
	if err != nil {
		return err
	}
	n := systemd.FromEnv()
	if err := n.Store("http", ln.(syscall.Conn)); err != nil {
		ln.Close()
		return err
	}
	return w.ServeDrained(ln, func() error { return n.Ready("") }, ctx.Done())
}

// ServeDrained serves ln with a drain.Server (HTTPS with ServeTLS if the
// worker serves TLS), calls ready, says it is ready, and drains when stop
// closes.
func (w *Worker) ServeDrained(ln net.Listener, ready func() error, stop <-chan struct{}, opts ...drain.Options) error {
	return w.serveDrainedBy(w.drainServer(opts...), ln, ready, stop)
}

// drainServer returns the drain.Server of the Go contenders, with the
// listener options opts[0] if given.
func (w *Worker) drainServer(opts ...drain.Options) *drain.Server {
	ds := &drain.Server{HTTP: w.NewServer(), OnReport: logNotable}
	ds.HandOverBatch, _ = strconv.Atoi(os.Getenv(EnvHandOverBatch))
	if w.TLS() {
		// TLS connections cannot be handed over: each client told to
		// close reconnects with a full handshake, spread over the window.
		ds.CloseSpread = w.CloseSpread
	}
	if len(opts) > 0 {
		// drain.Server reports through its own OnReport (it clears the
		// listener's): a listener hook runs after logNotable.
		ds.Listener = opts[0]
		if f := opts[0].OnReport; f != nil {
			ds.OnReport = func(r *drain.Report) { logNotable(r); f(r) }
		}
	}
	return ds
}

// serveDrainedBy serves ln with ds, calls ready, says it is ready, and
// drains when stop closes.
func (w *Worker) serveDrainedBy(ds *drain.Server, ln net.Listener, ready func() error, stop <-chan struct{}) error {
	errc := make(chan error, 1)
	go func() {
		if w.TLS() {
			errc <- ds.ServeTLS(ln, w.CertFile, w.KeyFile)
		} else {
			errc <- ds.Serve(ln)
		}
	}()
	if err := ready(); err != nil {
		ds.Shutdown(context.Background())
		<-errc
		return fmt.Errorf("ready: %w", err)
	}
	w.Ready()
	select {
	case <-stop:
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	}
	w.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	_, err := ds.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// logNotStepOut writes a listener's drain report to stderr (the run's
// workers.log) when its stop did not step out of the group first.
func logNotStepOut(r *drain.Report) {
	if r.Method != drain.MethodStepOut {
		b, _ := json.Marshal(r)
		fmt.Fprintf(os.Stderr, "drain report %d: not stepped out: %s\n", os.Getpid(), b)
	}
}

// logNotable writes a drain report to stderr (the run's workers.log) when it
// shows anything but a clean drain: connections not accounted for, failed
// migrations, resets sent during the stop, errors, a step-out refused or
// handshakes left in flight, connections closed without a request, idle
// (each a request its client may have had in flight) or at the deadline, a
// connection handoff that stopped early or returned connections, TLS
// connections that could not be handed over (TLSHandOver); with
// EnvReports set, always.
func logNotable(r *drain.Report) {
	h := r.HTTP
	if os.Getenv(EnvReports) == "" && r.Remainder == 0 && r.MigrateFailed == 0 && r.OutRsts == 0 && len(r.Errors) == 0 &&
		r.StepOutRefused == "" && r.HandshakesLeft == 0 &&
		(h == nil || (h.SilentClosed == 0 && len(h.Forced) == 0 && h.IdleClosed == 0 &&
			h.HandOverError == "" && h.HandOverReturned == 0 && h.TLSNotHandedOver == 0)) {
		return
	}
	b, _ := json.Marshal(r)
	fmt.Fprintf(os.Stderr, "drain report %d %s\n", os.Getpid(), b)
}
