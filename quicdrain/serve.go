package quicdrain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/httpserver"
)

// ServeOptions configures Serve. Of zerodrop.Options' HTTP fields it has
// only Drain: Serve hands over neither TCP connections nor session-ticket
// keys, has no pool and no readiness path, so those cannot be set.
type ServeOptions struct {
	// Config configures the generation (zerodrop.Open and Run; Handoff.Path
	// is required) and the TCP drains (Delay, Grace, Logger).
	zerodrop.Config
	// Drain, if set, is called with each TCP listener's drain.Server (and
	// the listener's name, its address as given) before it serves, as
	// zerodrop.Options.Drain is.
	Drain func(name string, s *drain.Server)
	// Gen configures each address's QUIC generation (Dir is required;
	// Name is suffixed with the address's index).
	Gen Config
	// QUIC configures the QUIC connections (http3.Server.QUICConfig).
	QUIC *quic.Config
	// AltSvcMaxAge is the ma of the Alt-Svc header the TCP servers send;
	// default 24 hours.
	AltSvcMaxAge time.Duration
}

// ServeReport says how a generation served by Serve ended.
type ServeReport struct {
	Generation uint64
	// Cause is why it stopped (zerodrop.CauseSuccessor, a signal, ctx).
	Cause string
	// TCP are the drain reports of the TCP servers (HTTP/1 and HTTP/2),
	// HTTP3 those of the QUIC generations, in the order of the addresses.
	TCP   []*drain.Report
	HTTP3 []Report
}

// ErrNoHandoff is returned by Serve without ServeOptions.Handoff.Path: the UDP
// socket goes from generation to generation through the handoff.
var ErrNoHandoff = errors.New("quicdrain: Serve needs Config.Handoff.Path")

// ErrNoTLS is returned by Serve for a server without a TLSConfig: HTTP/3
// has no clear-text form.
var ErrNoTLS = errors.New("quicdrain: Serve needs srv.TLSConfig")

// Serve runs srv as one generation of a service on each address given,
// over TCP (HTTP/1 and HTTP/2, by drain.Server.ServeTLS) and over UDP on
// the same port number (HTTP/3, by ServeHTTP3 on a Gen): the TCP responses
// carry an Alt-Svc header that advertises HTTP/3 on that port. The TCP
// listeners come from zerodrop.Open, the UDP socket from the same handoff
// Upgrader, so a successor started on SIGHUP (Config.UpgradeSignals)
// takes both. Serve returns once the generation stopped: at a successor's
// ready (HTTP3.Shutdown hands the QUIC clients over, TCP drains as
// zerodrop.Serve's do), a stop signal or the end of ctx (both drain,
// bounded by Config.Grace, default 30 s).
//
// srv.Handler serves both; Serve wraps it, for TCP only, to add Alt-Svc.
// Each TCP listener is served by a copy of srv's exported fields (srv
// itself is never served, so its hooks are never wrapped).
// Unlike zerodrop.Serve, Serve does not hand over TLS session-ticket keys
// or TCP connections, and has no pool or readiness path (see ServeOptions).
func Serve(ctx context.Context, srv *http.Server, addrs []string, opts ServeOptions) (*ServeReport, error) {
	switch {
	case srv == nil:
		return nil, drain.ErrNoHTTPServer
	case srv.TLSConfig == nil:
		return nil, ErrNoTLS
	case opts.Handoff.Path == "":
		return nil, ErrNoHandoff
	}
	gen, err := zerodrop.Open(ctx, addrs, opts.Config)
	if err != nil {
		return nil, err
	}
	defer gen.Close()
	s := &served{rep: &ServeReport{Generation: gen.Number()}, first: make(chan error, 2*len(addrs)), ctx: ctx, srv: srv, addrs: addrs, opts: opts}
	s.rep.Cause, err = gen.Run(ctx, s, fmt.Sprintf("generation %d serving %s over TCP and UDP", gen.Number(), strings.Join(addrs, " ")))
	return s.rep, err
}

// Start takes a QUIC generation beside each TCP listener and serves the
// TCP ones; the QUIC ones start reading once the generation is ready
// (Serving).
func (s *served) Start(gen *zerodrop.Generation) (<-chan error, error) {
	if err := s.listen(s.ctx, gen, s.srv, s.addrs, s.opts); err != nil {
		s.close()
		s.failed = true
		return nil, err
	}
	s.serve()
	return s.first, nil
}

// Serving makes each QUIC generation the one that reads its UDP socket.
func (s *served) Serving(ctx context.Context) error {
	for _, q := range s.quic {
		if err := q.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stop drains every server (nothing when Start failed: close released it).
func (s *served) Stop(ctx context.Context, _ string, delay time.Duration) error {
	if s.failed {
		return nil
	}
	return s.shutdown(ctx, delay, max(s.opts.Grace, 0))
}

// served is what Serve runs on each address: a drain.Server on the TCP
// listener, an HTTP3 on the QUIC generation.
type served struct {
	ctx    context.Context
	srv    *http.Server
	addrs  []string
	opts   ServeOptions
	failed bool // Start failed

	rep   *ServeReport
	lns   []net.Listener
	tcp   []*drain.Server
	quic  []*Gen
	h3    []*HTTP3
	first chan error
	wg    sync.WaitGroup
}

func (s *served) listen(ctx context.Context, gen *zerodrop.Generation, srv *http.Server, addrs []string, opts ServeOptions) error {
	u := gen.Upgrader()
	maxAge := opts.AltSvcMaxAge
	if maxAge <= 0 {
		maxAge = 24 * time.Hour
	}
	s.lns = gen.Listeners()
	for i, l := range s.lns {
		tcp := l.Addr().(*net.TCPAddr)
		host, _, err := net.SplitHostPort(addrs[i])
		if err != nil {
			return err
		}
		udpAddr := net.JoinHostPort(host, fmt.Sprint(tcp.Port)) // the port Open bound, if addrs[i] asked for any
		cfg := opts.Gen
		cfg.Name = fmt.Sprintf("%s%d", orString(cfg.Name, "quic"), i)
		if cfg.Logger == nil {
			cfg.Logger = opts.Logger
		}
		q, err := Listen(ctx, u, "udp "+addrs[i], "udp", udpAddr, cfg)
		if err != nil {
			return err
		}
		s.quic = append(s.quic, q)
		h3, err := ServeHTTP3(q, &http3.Server{Handler: srv.Handler, TLSConfig: http3.ConfigureTLSConfig(srv.TLSConfig.Clone()), QUICConfig: opts.QUIC})
		if err != nil {
			return err
		}
		s.h3 = append(s.h3, h3)
		hs := httpserver.Copy(srv)
		hs.Handler = altSvc(srv.Handler, tcp.Port, maxAge)
		ds := &drain.Server{HTTP: hs, Logger: opts.Logger}
		if opts.Drain != nil {
			opts.Drain(addrs[len(s.tcp)], ds)
		}
		s.tcp = append(s.tcp, ds)
	}
	return nil
}

func (s *served) serve() {
	for i, d := range s.tcp {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := d.ServeTLS(s.lns[i], "", ""); !errors.Is(err, http.ErrServerClosed) {
				s.first <- err
			}
		}()
	}
}

// shutdown drains every server at once: the TCP ones after delay, bounded
// by ctx (delay + grace), the HTTP/3 ones bounded by grace (0: 30 s).
func (s *served) shutdown(ctx context.Context, delay, grace time.Duration) error {
	if grace <= 0 {
		grace = 30 * time.Second
	}
	s.rep.TCP = make([]*drain.Report, len(s.tcp))
	s.rep.HTTP3 = make([]Report, len(s.h3))
	errs := make([]error, len(s.tcp))
	var wg sync.WaitGroup
	for i, d := range s.tcp {
		<-d.Serving() // a Shutdown before Serve has its listener would not drain it
		d.Delay = delay
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.rep.TCP[i], errs[i] = d.Shutdown(ctx)
		}()
	}
	for i, h := range s.h3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			s.rep.HTTP3[i] = h.Shutdown(hctx)
		}()
	}
	wg.Wait()
	s.wg.Wait()
	return errors.Join(errs...)
}

// close releases what listen took when Serve fails before serving.
func (s *served) close() {
	for _, h := range s.h3 {
		h.ln.Close()
	}
	for _, q := range s.quic {
		q.Close()
	}
	for _, h := range s.h3 {
		h.wg.Wait()
	}
	for _, l := range s.lns {
		l.Close()
	}
}

// altSvc adds to every response the Alt-Svc header that advertises HTTP/3
// on port.
func altSvc(next http.Handler, port int, maxAge time.Duration) http.Handler {
	if next == nil {
		next = http.DefaultServeMux
	}
	v := fmt.Sprintf(`h3=":%d"; ma=%d`, port, int(maxAge.Seconds()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", v)
		next.ServeHTTP(w, r)
	})
}

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
