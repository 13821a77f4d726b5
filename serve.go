package zerodrop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/internal/httpserver"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
)

// Options configures Serve: the generation (Config, the same as Open's,
// grpcdrain.Serve's and quicdrain.Serve's) and what only an http.Server
// has: readiness on a path, each listener's drain.Server, connection and
// session-ticket handoff, a pool of siblings. Each knob of the packages
// below keeps its one name there: Drain reaches every field of each
// listener's drain.Server. The zero value is Config's.
type Options struct {
	// Config configures the generation, as for Open.
	Config
	// Drain, if set, is called with each listener's drain.Server (and the
	// listener's name, its address as given) before it serves, to set what
	// Serve leaves at drain's defaults: CloseSpread, IdleGrace,
	// NewConnGrace, HandOverGrace, Hijacked, OnReport, and Listener (the
	// listener's stop: StepOut, Steerer, CloseTimeout). Serve sets HTTP,
	// Logger and HandOver (connection handoff) first; Delay is set at the
	// stop (Config.Delay, or 0 when a successor took over).
	Drain func(name string, s *drain.Server)
	// ReadyPath, if set, answers readiness on that path of every listener
	// (drain.Server.Ready: 200 while serving, 503 once the stop began)
	// before srv's handler sees the request.
	ReadyPath string
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
	// certificates, ChaCha20-Poly1305 unless the program imports
	// github.com/zerodrop/zerodrop/tlsresume/chacha) are drained as without
	// it, and HTTP/2 keeps its
	// two-step GOAWAY. The successor must run this version or later.
	TLSHandoff bool
	// Pool, if set, is a directory shared by the workers of a SO_REUSEPORT
	// pool (only we may write it, as for Handoff's), so that a worker
	// stopped by a signal or ctx passes its keep-alive connections to a
	// sibling instead of closing them: each worker serves <Pool>/<pid>-<random>.sock
	// (handoff.ListenConns, peers as Handoff.AllowUIDs allows) while it
	// runs, and at its stop passes its plain HTTP/1.1 connections, each
	// once it waits for its next request, to the newest other worker there
	// that answers (in a roll, the replacement started before the stop). A
	// stop because a successor took over passes them to the successor
	// instead.
	Pool string
	// NoTicketHandoff keeps Serve from making and installing
	// Handoff.TicketKeys (and from keeping them in systemd's fd store):
	// for a TLSConfig whose tickets are managed
	// elsewhere (keys a fleet shares, set with SetSessionTicketKeys).
	NoTicketHandoff bool
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
// (Options.Handoff.TicketKeys), and under systemd (NOTIFY_SOCKET set) they
// are kept in its fd store for the next start (a restart; the unit needs
// FileDescriptorStoreMax= of at least 1 beside its stored sockets), so that
// clients resume their sessions across restarts: Serve replaces
// srv.TLSConfig by a clone whose WrapSession and UnwrapSession are the
// keys' (ticket.Keys.Install), unless Options.NoTicketHandoff,
// Options.Handoff.TicketKeys or either hook is set.
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
	gen, err := Open(ctx, addrs, opts.Config)
	if err != nil {
		return nil, err
	}
	g := &generationSet{Generation: gen}
	defer g.close()
	h := &httpService{g: g, srv: srv, opts: opts, log: log}
	rep := &Report{Generation: g.Number()}
	rep.Cause, err = g.Run(ctx, h, fmt.Sprintf("generation %d serving %s", rep.Generation, strings.Join(addrs, " ")))
	rep.Drains = h.drains
	return rep, err
}

// httpService is Serve's Service: a drain.Server per listener, each
// passing its idle connections to a successor or a sibling of the Pool.
type httpService struct {
	g       *generationSet
	srv     *http.Server
	opts    Options
	log     *zap.Logger
	servers []*drain.Server
	served  *serveResult
	drains  []*drain.Report
}

// Start serves every listener and has the servers that hand their
// connections over serve those passed to them.
func (h *httpService) Start(*Generation) (<-chan error, error) {
	h.servers, h.served = h.g.serve(h.srv, h.opts, h.log)
	if err := h.g.passConns(h.servers, h.opts, h.log); err != nil {
		return nil, fmt.Errorf("connection handoff: %w", err)
	}
	return h.served.first, nil
}

// Stop drains every server at once.
func (h *httpService) Stop(ctx context.Context, _ string, delay time.Duration) error {
	if h.g.pool != nil {
		h.g.pool.StopListening() // siblings stopping now pick another
	}
	if h.g.u != nil {
		h.g.u.StopTakingConns() // none acked that ServeConn would close
	}
	for _, s := range h.servers {
		<-s.Serving() // a Shutdown before Serve has its listener would not drain it
	}
	var err error
	h.drains, err = drainAll(ctx, h.servers, h.served, delay)
	return err
}

// serveTickets makes opts.Handoff.TicketKeys for srv and installs them into a clone
// of its TLSConfig, when Serve does (see Serve), and returns what closes
// them once Serve is done.
func serveTickets(srv *http.Server, opts *Options) (func(), error) {
	c := srv.TLSConfig
	if c == nil || (opts.Handoff.Path == "" && systemd.FromEnv() == nil) || opts.NoTicketHandoff || opts.Handoff.TicketKeys != nil || c.WrapSession != nil || c.UnwrapSession != nil {
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
	srv.TLSConfig, opts.Handoff.TicketKeys = c, keys
	return func() { keys.Close() }, nil
}

// generationSet is a Generation and the siblings of Options.Pool.
type generationSet struct {
	*Generation
	pool *handoff.Pool // nil without Pool
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
			s, err := g.pool.Sender(ctx, name)
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
	p, err := handoff.JoinPool(opts.Pool, handoff.ConnsConfig{AllowUIDs: opts.Handoff.AllowUIDs, Logger: log, Addrs: addrs}, handlers)
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
		g.pool.Close()
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
			hs[i] = httpserver.Copy(srv)
		}
	}
	for i, l := range g.lns {
		h := hs[i]
		servers[i] = &drain.Server{HTTP: h, Logger: log}
		if (g.u != nil || opts.Pool != "") && !opts.NoConnHandoff && (h.TLSConfig == nil || opts.TLSHandoff) {
			servers[i].HandOver = g.handOver(g.names[i])
			servers[i].TLSHandOver = opts.TLSHandoff
		}
		if opts.Drain != nil {
			opts.Drain(g.names[i], servers[i])
		}
		if opts.ReadyPath != "" {
			h.Handler = readiness(opts.ReadyPath, servers[i].Ready(), h.Handler)
		}
		// Chosen now: once a connection is handed to servers[i]
		// (passConns), net/http's HTTP/2 set-up gives a server without a
		// TLSConfig an empty one.
		serveFn := servers[i].Serve
		if h.TLSConfig != nil {
			serveFn = func(l net.Listener) error { return servers[i].ServeTLS(l, "", "") }
		}
		res.wg.Add(1)
		go func() {
			defer res.wg.Done()
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

// drainAll shuts every server down at once, each server's delay first,
// bounded by ctx, and waits for their Serve calls to return.
func drainAll(ctx context.Context, servers []*drain.Server, served *serveResult, delay time.Duration) ([]*drain.Report, error) {
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

func orDefaultDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
