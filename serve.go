package zerodrop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
)

// Options configures Serve. The zero value serves fresh (or socket-activated)
// listeners without a handoff, and stops on SIGTERM or SIGINT.
type Options struct {
	// Handoff is the handoff socket (package handoff): a path in a directory
	// nobody else can write, or "@name" in the abstract namespace. When set,
	// a process started with the same Handoff inherits our listeners and we
	// drain once it is ready; empty means no handoff.
	Handoff string
	// PIDFile, with Handoff, is replaced with the serving generation's pid
	// (handoff.Config.PIDFile).
	PIDFile string
	// AllowUIDs widens who may take our listeners over (handoff.Config).
	AllowUIDs []uint32
	// Listen creates fresh sockets, and is what inherited and activated ones
	// are checked against. With Handoff set and Listen.Migration left at its
	// zero value, the tcp_migrate_req check is off: a handoff needs no
	// migration (a reuseport pool that rolls by stopping members should set
	// its own policy).
	Listen reuseport.Config
	// UpgradeSignals start a successor (Successor) when Handoff is set;
	// default SIGHUP. Signals stop this generation; default SIGTERM and
	// SIGINT.
	UpgradeSignals, Signals []os.Signal
	// Successor returns the command that starts the next generation; default:
	// this executable with our arguments, environment, stdout and stderr.
	// It must not be started yet. Under systemd it is started as systemd's
	// child (systemd.StartSuccessor), so that systemd waits for its drain at
	// the next stop.
	Successor func() *exec.Cmd
	// ReadyPath, if set, answers readiness on that path of every listener
	// (drain.Server.Ready: 200 while serving, 503 once the stop began)
	// before srv's handler sees the request.
	ReadyPath string
	// Delay keeps serving, with readiness failing, this long after a
	// signal or ctx stops us, so that load balancers notice (drain.Server.Delay).
	// A stop because a successor took over has no delay: it serves the same
	// sockets.
	Delay time.Duration
	// NoConnHandoff, with Handoff set, closes our keep-alive connections
	// at a handoff as a plain stop does, instead of passing them to the
	// successor. By default every plain HTTP/1.1 connection goes to the
	// successor once it waits for its next request (drain.Server.HandOver,
	// handoff.Upgrader.PassConns), so that its client notices nothing; TLS
	// and HTTP/2 connections are drained (they cannot be passed).
	NoConnHandoff bool
	// TLSHandoff, with Handoff or Pool, passes idle HTTP/1.1 TLS 1.3
	// connections too, with their session (drain.Server.TLSHandOver,
	// package tlsresume): their clients see neither a close nor a
	// handshake. Connections whose state cannot be proven (TLS 1.2, client
	// certificates) are drained as without it, and HTTP/2 keeps its
	// two-step GOAWAY. The successor must run this version or later.
	TLSHandoff bool
	// Pool, if set, is a directory shared by the workers of a SO_REUSEPORT
	// pool (only we may write it, as for Handoff's), so that a worker
	// stopped by a signal or ctx passes its keep-alive connections to a
	// sibling instead of closing them: each worker serves <Pool>/<pid>-<random>.sock
	// (handoff.ListenConns) while it runs, and at its stop passes its plain
	// HTTP/1.1 connections, each once it waits for its next request, to the
	// newest other worker there that answers (in a roll, the replacement
	// started before the stop). A stop because a successor took over
	// passes them to the successor instead.
	Pool string
	// CloseSpread is every listener's drain.Server.CloseSpread: the
	// keep-alive connections the drain does not hand over (TLS ones, and
	// all with NoConnHandoff or without a successor) are told to close,
	// and HTTP/2 ones to go away, spread over this window instead of all
	// at once, so that their clients' reconnections (over TLS, each a full
	// handshake) do not arrive in one burst. The drain lasts up to this
	// much longer (see drain.Server.CloseSpread for its cost over HTTP/2).
	// Zero (the default): all at once.
	CloseSpread time.Duration
	// TicketKeys are the TLS session-ticket keys handed to the successor
	// with the listeners, and taken from the predecessor
	// (handoff.Config.TicketKeys), so that a TLS client reconnecting after
	// a restart resumes its session instead of a full handshake. Serve,
	// for a srv with a TLSConfig and Handoff, makes them when nil and
	// installs them into its TLSConfig (see Serve); set them for a server
	// Serve does not run (Open, package grpc's Serve) and install them
	// yourself (ticket.Keys.Install).
	TicketKeys *ticket.Keys
	// NoTicketHandoff keeps Serve from making and installing TicketKeys:
	// for a TLSConfig whose tickets are managed elsewhere (keys a fleet
	// shares, set with SetSessionTicketKeys).
	NoTicketHandoff bool
	// Grace bounds the drain; default 30 s.
	Grace time.Duration
	// Hijacked is every listener's drain.Server.Hijacked: if set, it is
	// called once for each hijacked connection (a WebSocket) still open
	// when the listener has stopped, for example drain.GoingAway, so that
	// its owner ends it before Grace runs out. It must not block. Hijacked
	// connections are never passed to a successor.
	Hijacked func(net.Conn)
	// Logger receives what Serve does, and is given to handoff and drain; nil
	// means no logging.
	Logger *zap.Logger
	// OnListen, if set, is called once every listener is open, before any is
	// served (a handler that names the generation learns it here).
	OnListen func(generation uint64, addrs []net.Addr)
	// OnServing, if set, is called once every listener is served and the
	// predecessor (if any) and systemd (if it runs us) were told we are ready.
	OnServing func(generation uint64, addrs []net.Addr)
	// OnHandoff is handoff.Config.OnHandoff (for example
	// stats.Hub.HandoffHook); OnReport is drain.Server.OnReport, called once
	// per listener (for example stats.Hub.DrainHook).
	OnHandoff func(handoff.Result, error)
	OnReport  func(*drain.Report)
}

// Report says how a generation ended.
type Report struct {
	Generation uint64          `json:"generation"`
	Cause      string          `json:"cause"`  // "successor ready", a signal's name, or the ctx's error
	Drains     []*drain.Report `json:"drains"` // one per address, in order
}

// ErrNoAddress is returned by Serve when it is given no address.
var ErrNoAddress = errors.New("zerodrop: no address to serve")

// Serve runs srv as one generation of a service on the TCP addresses given:
// it takes each listener from the predecessor on Options.Handoff, else from
// systemd socket activation, else creates a fresh reuseport socket; serves
// them (each through a drain.Server); tells the predecessor and systemd it is
// ready; and then waits. On an upgrade signal it starts a successor. It stops
// when the successor is ready, on a stop signal or when ctx ends, drains
// every listener without losing a connection or a request, and returns the
// report. A listener is named by its address as given, so a successor must be
// given the same addresses.
//
// A srv with a TLSConfig is served over TLS (drain.Server.ServeTLS, with the
// certificates of its TLSConfig: Certificates, GetCertificate or
// GetConfigForClient), HTTP/2 offered by ALPN as net/http does. With
// Handoff, its session-ticket keys go to the successor with the sockets
// (Options.TicketKeys), so that clients resume their sessions across
// restarts: Serve replaces srv.TLSConfig by a clone whose WrapSession and
// UnwrapSession are the keys' (ticket.Keys.Install), unless
// Options.NoTicketHandoff, Options.TicketKeys or either hook is set.
//
// srv serves the first address; each further one is served by a copy of
// srv's exported fields (its RegisterOnShutdown functions run for the first
// only). Serve sets srv's hooks (see drain.Server): do not change them
// while it runs, and do not call srv.Shutdown or srv.Close; end ctx instead.
func Serve(ctx context.Context, srv *http.Server, addrs []string, opts Options) (*Report, error) {
	switch {
	case srv == nil:
		return nil, drain.ErrNoHTTPServer
	case len(addrs) == 0:
		return nil, ErrNoAddress
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	closeKeys, err := serveTickets(srv, &opts)
	if err != nil {
		return nil, err
	}
	defer closeKeys()
	gen, err := Open(ctx, addrs, opts)
	if err != nil {
		return nil, err
	}
	g := &generationSet{Generation: gen}
	defer g.close()
	rep := &Report{Generation: g.Number()}
	if opts.OnListen != nil {
		opts.OnListen(rep.Generation, g.Addrs())
	}
	servers, served := g.serve(srv, opts, log)
	shutdown := func(cause string, delay time.Duration) (*Report, error) {
		rep.Cause = cause
		if g.pool != nil {
			g.pool.stopListening() // siblings stopping now pick another
		}
		if g.u != nil {
			g.u.StopTakingConns() // none acked that ServeConn would close
		}
		g.Stopping(cause)
		var err error
		rep.Drains, err = drainAll(servers, served, delay, orDefaultDuration(opts.Grace, 30*time.Second))
		return rep, err
	}

	if err := g.passConns(servers, opts, log); err != nil {
		_, serr := shutdown("connection handoff failed", 0)
		return rep, errors.Join(err, serr)
	}
	if err := g.Ready(fmt.Sprintf("generation %d serving %s", rep.Generation, strings.Join(addrs, " "))); err != nil {
		_, serr := shutdown("ready failed", 0)
		return rep, errors.Join(err, serr)
	}
	if opts.OnServing != nil {
		opts.OnServing(rep.Generation, g.Addrs())
	}
	cause, delay, err := g.Wait(ctx, served.first)
	if err != nil {
		_, serr := shutdown(cause, 0)
		return rep, errors.Join(fmt.Errorf("zerodrop: serve: %w", err), serr)
	}
	rep, err = shutdown(cause, delay)
	g.Linger(ctx, cause)
	return rep, err
}

// serveTickets makes opts.TicketKeys for srv and installs them into a clone
// of its TLSConfig, when Serve does (see Serve), and returns what closes
// them once Serve is done.
func serveTickets(srv *http.Server, opts *Options) (func(), error) {
	c := srv.TLSConfig
	if c == nil || opts.Handoff == "" || opts.NoTicketHandoff || opts.TicketKeys != nil || c.WrapSession != nil || c.UnwrapSession != nil {
		return func() {}, nil
	}
	keys, err := ticket.New()
	if err != nil {
		return nil, err
	}
	c = c.Clone()
	if err := keys.Install(c); err != nil {
		keys.Close()
		return nil, err
	}
	srv.TLSConfig, opts.TicketKeys = c, keys
	return func() { keys.Close() }, nil
}

// generationSet is a Generation and the siblings of Options.Pool.
type generationSet struct {
	*Generation
	pool *siblings // nil without Pool
}

// handOver is a drain.Server.HandOver that passes the connections of the
// listener name to a successor that takes them.
func (g *generationSet) handOver(name string) func(context.Context, []drain.Detached) (int, error) {
	return func(ctx context.Context, conns []drain.Detached) (int, error) {
		pass := g.u.PassConns
		if g.u == nil || !g.u.TakesConns(name) {
			if g.pool == nil {
				return 0, fmt.Errorf("zerodrop: no successor takes the connections of %s: %w", name, handoff.ErrNotTaken)
			}
			s, err := g.pool.sender(ctx, name)
			if err != nil {
				return 0, err
			}
			pass = s.PassConns
		}
		if conns == nil {
			return 0, nil
		}
		pcs := make([]handoff.PassedConn, len(conns))
		for j, d := range conns {
			pcs[j] = handoff.PassedConn{Listener: name, Conn: d.Conn, State: d.Unread}
		}
		return pass(ctx, pcs)
	}
}

// passConns has the servers that hand their connections over serve those
// their predecessor or a sibling passes. It must run before ready.
func (g *generationSet) passConns(servers []*drain.Server, opts Options, log *zap.Logger) error {
	handlers, addrs := map[string]func(handoff.PassedConn){}, map[string]net.Addr{}
	for i, s := range servers {
		if s.HandOver == nil {
			continue
		}
		h := func(pc handoff.PassedConn) { s.ServeConn(pc.Conn, pc.State) }
		handlers[g.names[i]], addrs[g.names[i]] = h, g.lns[i].Addr()
		if g.u == nil {
			continue
		}
		if err := g.u.HandleConns(g.names[i], h); err != nil {
			return err
		}
	}
	if opts.Pool == "" || len(handlers) == 0 {
		return nil
	}
	p, err := listenSiblings(opts.Pool, handoff.ConnsConfig{AllowUIDs: opts.AllowUIDs, Logger: log, Addrs: addrs}, handlers)
	if err != nil {
		return err
	}
	g.pool = p
	return nil
}

// close closes the siblings and the Generation (the drain closes the
// listeners).
func (g *generationSet) close() {
	if g.pool != nil {
		g.pool.close()
	}
	g.Close()
}

// serveResult collects the Serve goroutines' results: first receives the
// first one that is not http.ErrServerClosed.
type serveResult struct {
	first chan error
	wg    sync.WaitGroup
}

// serve starts a drain.Server on each listener; the servers own them now.
func (g *generationSet) serve(srv *http.Server, opts Options, log *zap.Logger) ([]*drain.Server, *serveResult) {
	res := &serveResult{first: make(chan error, len(g.lns))}
	servers := make([]*drain.Server, len(g.lns))
	// Every listener but the first gets a copy of srv, made before anything
	// changes srv: the first drain.Server wraps srv's Handler, ConnState and
	// ConnContext as it starts serving, and a copy made after would share
	// its hooks (and race with them).
	hs := make([]*http.Server, len(g.lns))
	for i := range hs {
		hs[i] = srv
		if i > 0 {
			hs[i] = copyServer(srv)
		}
	}
	for i, l := range g.lns {
		h := hs[i]
		servers[i] = &drain.Server{HTTP: h, Logger: log, OnReport: opts.OnReport, Hijacked: opts.Hijacked, CloseSpread: opts.CloseSpread}
		if (g.u != nil || opts.Pool != "") && !opts.NoConnHandoff && (h.TLSConfig == nil || opts.TLSHandoff) {
			servers[i].HandOver = g.handOver(g.names[i])
			servers[i].TLSHandOver = opts.TLSHandoff
		}
		if opts.ReadyPath != "" {
			h.Handler = readiness(opts.ReadyPath, servers[i].Ready(), h.Handler)
		}
		res.wg.Add(1)
		go func() {
			defer res.wg.Done()
			serveFn := servers[i].Serve
			if h.TLSConfig != nil {
				serveFn = func(l net.Listener) error { return servers[i].ServeTLS(l, "", "") }
			}
			if err := serveFn(l); !errors.Is(err, http.ErrServerClosed) {
				res.first <- err
			}
		}()
	}
	return servers, res
}

// readiness answers path with ready and everything else with next (or
// http.DefaultServeMux, as http.Server does when next is nil).
func readiness(path string, ready, next http.Handler) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path {
			ready.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// drainAll shuts every server down at once, bounded by grace, and waits for
// their Serve calls to return.
func drainAll(servers []*drain.Server, served *serveResult, delay, grace time.Duration) ([]*drain.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), delay+grace)
	defer cancel()
	reps := make([]*drain.Report, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		s.Delay = delay
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = s.Shutdown(ctx)
		}()
	}
	wg.Wait()
	served.wg.Wait()
	return reps, errors.Join(errs...)
}

// copyServer copies the exported fields of an http.Server that configure
// serving.
func copyServer(s *http.Server) *http.Server {
	return &http.Server{
		Handler: s.Handler, DisableGeneralOptionsHandler: s.DisableGeneralOptionsHandler, TLSConfig: s.TLSConfig,
		ReadTimeout: s.ReadTimeout, ReadHeaderTimeout: s.ReadHeaderTimeout, WriteTimeout: s.WriteTimeout,
		IdleTimeout: s.IdleTimeout, MaxHeaderBytes: s.MaxHeaderBytes, TLSNextProto: s.TLSNextProto,
		ConnState: s.ConnState, ErrorLog: s.ErrorLog, BaseContext: s.BaseContext, ConnContext: s.ConnContext,
		HTTP2: s.HTTP2, Protocols: s.Protocols,
	}
}

func orDefaultDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
