package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// benchPort is the port every contender serves in its namespace.
const benchPort = 8080

// runSpec is one run: a contender at a concurrency, restarted on a schedule.
type runSpec struct {
	Contender   string        `json:"contender"`
	Concurrency int           `json:"concurrency"`
	Rep         int           `json:"rep"`
	Restarts    int           `json:"restarts"`  // asked for
	Period      time.Duration `json:"period_ns"` // after a restart, before the next
	Lead        time.Duration `json:"lead_ns"`   // steady load before the first
	Tail        time.Duration `json:"tail_ns"`   // steady load after the last
	Window      time.Duration `json:"window_ns"` // around a mark
	Timeout     time.Duration `json:"timeout_ns"`
	KeepAlive   bool          `json:"keepalive"`
	// TLS serves and loads HTTPS (HTTP/1.1 from the load, a new connection
	// and handshake per request unless KeepAlive); HTTP2 loads HTTP/2 over
	// TLS, StreamsPerConn workers sharing each connection.
	TLS            bool `json:"tls,omitempty"`
	HTTP2          bool `json:"http2,omitempty"`
	StreamsPerConn int  `json:"streams_per_conn,omitempty"`
	// Post makes every request a small POST net/http cannot replay
	// (load.Config.Post).
	Post bool `json:"post,omitempty"`
	// H2load loads HTTP/2 with h2load instead of net/http's Transport: one
	// h2load run per restart (scheduleH2load), Concurrency streams on
	// Concurrency/StreamsPerConn connections.
	H2load bool `json:"h2load,omitempty"`
	// H3 loads HTTP/3 with quic-go's http3.Transport (TLS implied),
	// StreamsPerConn workers sharing each connection; only the contenders
	// that serve HTTP/3 run.
	H3   bool    `json:"h3,omitempty"`
	Rate float64 `json:"rate,omitempty"` // open loop: requests per second
	// Pool, when positive, is the number of clients of a sparse keep-alive
	// pool (load.Config.Pool), each sending at intervals in [PoolMin,
	// PoolMax]; Concurrency then equals it.
	Pool    int           `json:"pool,omitempty"`
	PoolMin time.Duration `json:"pool_min_ns,omitempty"`
	PoolMax time.Duration `json:"pool_max_ns,omitempty"`
}

// mode describes the load of s in words, for the results' header.
func (s runSpec) mode() string {
	if s.Post && s.H3 {
		return s.connMode() + "; every request a small POST, which quic-go's client sends again only if the server rejected it unprocessed (H3_REQUEST_REJECTED)"
	}
	if s.Post {
		return s.connMode() + "; every request a small POST net/http cannot replay (GetBody nil)"
	}
	return s.connMode()
}

// connMode describes the protocol and connections of s's load.
func (s runSpec) connMode() string {
	conn := "a new connection per request"
	if s.KeepAlive {
		conn = "keep-alive"
	}
	switch {
	case s.H3:
		return fmt.Sprintf("HTTP/3 (QUIC), quic-go's http3.Transport, %d workers' streams per connection", s.StreamsPerConn)
	case s.Pool > 0 && s.TLS:
		return fmt.Sprintf("HTTPS (TLS), sparse keep-alive pool of %d clients", s.Pool)
	case s.Pool > 0:
		return fmt.Sprintf("plain HTTP/1.1, sparse keep-alive pool of %d clients", s.Pool)
	case s.H2load:
		return fmt.Sprintf("HTTP/2 over TLS (ALPN h2), h2load (nghttp2), which never retries: one %v run per restart, begun %v before it, %d streams per connection",
			h2loadRun, h2loadLead, s.StreamsPerConn)
	case s.HTTP2:
		return fmt.Sprintf("HTTP/2 over TLS (ALPN h2), net/http's Transport, %d workers' streams per connection", s.StreamsPerConn)
	case s.TLS && !s.KeepAlive:
		return "HTTPS (TLS 1.3, HTTP/1.1), a new connection and a full handshake per request"
	case s.TLS:
		return "HTTPS (TLS 1.3, HTTP/1.1), keep-alive"
	}
	return "plain HTTP/1.1, " + conn
}

// maxDuration bounds a run: every restart may take as long as a worker may
// take to start and to stop.
func (s runSpec) maxDuration() time.Duration {
	return s.Lead + time.Duration(s.Restarts)*(s.Period+readyTimeout+exitTimeout) + s.Tail
}

// runResult is what one run measured.
type runResult struct {
	Spec     runSpec `json:"spec"`
	Restarts int     `json:"restarts"` // done
	// RestartMS is how long each restart took, from its start until the new
	// server served and the old one was gone (or reloading, for nginx).
	RestartMS []float64          `json:"restart_ms"`
	Counters  reuseport.Counters `json:"counters"` // deltas over the run
	Load      *load.Result       `json:"load,omitempty"`
	H2load    *h2loadResult      `json:"h2load,omitempty"` // instead of Load, with -h2load
	// QUIC is what the HTTP/3 workers and clients reported (-h3).
	QUIC *quicResult `json:"quic,omitempty"`
	// Handshakes are the TLS handshakes the Go workers served (-tls, -h2),
	// as they report them at exit.
	Handshakes *handshakes `json:"handshakes,omitempty"`
	// CPU is the Go workers' CPU time (user + system), steady and over
	// the restarts (-tls, -h2), from /proc and their reports at exit.
	CPU     *cpuUse `json:"cpu,omitempty"`
	Skipped string  `json:"skipped,omitempty"`
	Error   string  `json:"error,omitempty"`
}

// findSpec returns the contender named name.
func findSpec(name string) (spec, bool) {
	for _, s := range specs() {
		if s.name == name {
			return s, true
		}
	}
	return spec{}, false
}

// runOne runs s in the current namespaces, which it configures: call it in a
// fresh network namespace. Worker output goes to stderr.
func runOne(ctx context.Context, s runSpec, stderr *os.File) runResult {
	res := runResult{Spec: s}
	sp, ok := findSpec(s.Contender)
	if !ok {
		res.Error = fmt.Sprintf("no contender %q", s.Contender)
		return res
	}
	if (s.TLS || s.HTTP2) && sp.noTLS != "" {
		res.Skipped = sp.noTLS // before the namespace is touched
		return res
	}
	switch {
	case s.H3 && !sp.h3:
		res.Skipped = "no HTTP/3"
		return res
	case !s.H3 && sp.h3Only:
		res.Skipped = "HTTP/3 only: run with -h3"
		return res
	}
	if sp.check != nil {
		if err := sp.check(); err != nil {
			res.Skipped = err.Error()
			return res
		}
	}
	if err := setupNamespace(sp.migrateReq); err != nil {
		res.Error = err.Error()
		return res
	}
	if err := measure(ctx, sp, &res, stderr); err != nil {
		res.Error = err.Error()
	}
	return res
}

// measure starts the contender, loads it while restarting it, and stops it.
func measure(ctx context.Context, sp spec, res *runResult, stderr *os.File) error {
	s := res.Spec
	dir, err := os.MkdirTemp("", "contenders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := workerBin
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	env := &runEnv{addr: "127.0.0.1:" + strconv.Itoa(benchPort), dir: dir, workerBin: bin, stderr: stderr}
	url := "http://" + env.addr + "/"
	var clientTLS *tls.Config
	if s.TLS || s.HTTP2 {
		// The run's own certificate, for 127.0.0.1; the load trusts only
		// it.
		cert, err := netnstest.WriteCert(dir, 24*time.Hour)
		if err != nil {
			return fmt.Errorf("certificate: %w", err)
		}
		env.extra = []string{worker.EnvTLSCert + "=" + cert.CertFile, worker.EnvTLSKey + "=" + cert.KeyFile}
		// A session cache, shared by the clients, as a browser's or a
		// client library's: a reconnection offers the last ticket the
		// server issued and resumes if the server still decrypts it.
		url, clientTLS = "https://"+env.addr+"/", &tls.Config{RootCAs: cert.Pool, ClientSessionCache: tls.NewLRUClientSessionCache(0)}
		env.certFile, env.keyFile, env.clientTLS = cert.CertFile, cert.KeyFile, clientTLS
	}
	if sp.bpf {
		if env.bpfDir, err = mountBPF(dir); err != nil {
			return fmt.Errorf("%s: %w", sp.name, err)
		}
		defer unix.Unmount(env.bpfDir, unix.MNT_DETACH)
	}
	if env.clientTLS != nil { // the Go workers report their CPU in TLS runs
		proc, unmount, err := procDir(dir)
		if err != nil {
			return fmt.Errorf("cpu: %w", err)
		}
		defer unmount()
		env.tls.cpu.proc = proc
	}
	c := sp.make()
	if err := c.start(ctx, env); err != nil {
		return fmt.Errorf("%s: start: %w", sp.name, err)
	}
	if s.H2load {
		return measureH2load(ctx, c, res, url)
	}
	var h3c h3Count
	var h3 func(*tls.Config) http.RoundTripper
	if s.H3 {
		h3 = h3RoundTripper(&h3c)
	}
	g, err := load.New(load.Config{URL: url, TLS: clientTLS, HTTP2: s.HTTP2, StreamsPerConn: s.StreamsPerConn, Post: s.Post, RoundTripper: h3,
		Concurrency: s.Concurrency, Rate: s.Rate, Duration: s.maxDuration(), Timeout: s.Timeout,
		KeepAlive: s.KeepAlive, Header: "X-Generation", Window: s.Window, Pool: s.Pool, PoolMin: s.PoolMin, PoolMax: s.PoolMax})
	if err != nil {
		c.stop(ctx)
		return err
	}
	before, err := reuseport.ReadCounters()
	if err != nil {
		c.stop(ctx)
		return err
	}
	type ran struct {
		r   *load.Result
		err error
	}
	done := make(chan ran, 1)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	go func() { r, err := g.Run(lctx); done <- ran{r, err} }()
	cpu := newCPUPhases(&env.tls.cpu, s.Lead, func() int64 { n, _ := g.Count(); return n })
	took, rerr := schedule(ctx, s, c, cpu.mark(g.Mark))
	cpu.finish()
	// Counters before the load stops: abandoned clients' connections reset.
	after, cerr := reuseport.ReadCounters()
	stopLoad() // the requests in flight now are not counted: none is near a restart
	out := <-done
	if errors.Is(out.err, context.Canceled) && ctx.Err() == nil {
		out.err = nil
	}
	serr := c.stop(ctx)
	res.Restarts, res.RestartMS, res.Load, res.Counters = len(took), took, out.r, after.Sub(before)
	if clientTLS != nil {
		res.Handshakes = env.handshakes()
		res.CPU = cpu.result() // the Go workers report it in TLS runs
	}
	if s.H3 {
		res.QUIC = env.tls.quic.result(&h3c)
	}
	for _, err := range []error{rerr, out.err, cerr, serr} {
		if err != nil {
			return err
		}
	}
	return nil
}

// measureH2load restarts the started contender c under h2load
// (scheduleH2load), then stops it.
func measureH2load(ctx context.Context, c contender, res *runResult, url string) error {
	path, err := exec.LookPath("h2load")
	if err != nil {
		c.stop(ctx)
		return fmt.Errorf("-h2load needs h2load (apt-get install nghttp2-client): %w", err)
	}
	before, err := reuseport.ReadCounters()
	if err != nil {
		c.stop(ctx)
		return err
	}
	took, h, rerr := scheduleH2load(ctx, res.Spec, c, path, url)
	after, cerr := reuseport.ReadCounters()
	serr := c.stop(ctx)
	res.Restarts, res.RestartMS, res.H2load, res.Counters = len(took), took, h, after.Sub(before)
	return errors.Join(rerr, cerr, serr)
}

// schedule waits s.Lead, restarts c s.Restarts times, waiting s.Period after
// each restart has ended, then waits s.Tail. It returns how long each
// restart took, in milliseconds.
func schedule(ctx context.Context, s runSpec, c contender, mark func(string)) ([]float64, error) {
	var took []float64
	if err := sleep(ctx, s.Lead); err != nil {
		return took, err
	}
	if s.Restarts == 0 {
		return took, sleep(ctx, s.Tail)
	}
	for n := range s.Restarts {
		t0 := time.Now()
		if err := c.restart(ctx, mark); err != nil {
			return took, fmt.Errorf("%s: restart %d: %w", s.Contender, n+1, err)
		}
		took = append(took, float64(time.Since(t0).Microseconds())/1000)
		wait := s.Period
		if n == s.Restarts-1 {
			wait = s.Tail
		}
		if err := sleep(ctx, wait); err != nil {
			return took, err
		}
	}
	return took, nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// handshakes are TLS handshakes served in a run.
type handshakes struct {
	Full    int64 `json:"full"`
	Resumed int64 `json:"resumed"`
}

// handshakes waits (at most 5 s) until every worker's stdout has been read
// to its end, and returns the handshakes they reported; nil if none did (a
// contender whose servers are not Go workers, such as nginx).
func (e *runEnv) handshakes() *handshakes {
	done := make(chan struct{})
	go func() { e.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	h := &handshakes{Full: e.tls.Full.Load(), Resumed: e.tls.Resumed.Load()}
	if h.Full+h.Resumed == 0 {
		return nil
	}
	return h
}
