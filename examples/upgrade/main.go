package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// config is the command line.
type config struct {
	addr, socket, exec string
	grace, delay       time.Duration
	args               []string // passed on to the successor
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("zerodrop-upgrade-%d", os.Geteuid()))
	c := &config{args: args}
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (the first generation)")
	fs.StringVar(&c.socket, "socket", filepath.Join(dir, "handoff.sock"),
		"handoff socket; its directory is created 0700, and upgrade.pid is written next to it")
	fs.StringVar(&c.exec, "exec", "", "binary to start on SIGHUP (default: this binary's path again)")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "bound on the drain")
	fs.DurationVar(&c.delay, "delay", 0, "keep serving this long after /ready turns 503 at SIGTERM (drain.Server.Delay)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

func main() {
	c, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		os.Exit(2)
	}
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "upgrade example:", err)
		os.Exit(1)
	}
}

// run serves one generation with zerodrop.Serve: it inherits or creates the
// listener, serves, starts a successor on SIGHUP, and drains once a successor
// is ready, on SIGTERM or SIGINT (after -delay), or when ctx ends.
func run(ctx context.Context, c *config, out io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(c.socket), 0o700); err != nil {
		return err
	}
	hub := new(stats.Hub) // served on /metrics
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second}
	var gen atomic.Uint64
	srv.Handler = newHandler(&gen, hub, promstats.Options{Groups: []promstats.Group{{Listener: c.addr, Addr: c.addr}}})
	rep, err := zerodrop.Serve(ctx, srv, []string{c.addr}, zerodrop.Options{
		Config: zerodrop.Config{
			Handoff: handoff.Config{Path: c.socket, PIDFile: filepath.Join(filepath.Dir(c.socket), "upgrade.pid"),
				OnHandoff: hub.HandoffHook()},
			Delay:     c.delay, // load balancers must notice; a successor needs no delay
			Grace:     c.grace,
			Successor: func() *exec.Cmd { return successor(c) },
			OnListen: func(g uint64, _ []net.Addr) {
				gen.Store(g)
				hub.SetGeneration(g)
			},
			OnServing: func(g uint64, addrs []net.Addr) {
				fmt.Fprintf(out, "generation %d serving %s pid %d\n", g, addrs[0], os.Getpid())
			},
		},
		ReadyPath: "/ready",
		Drain:     func(_ string, s *drain.Server) { s.OnReport = hub.DrainHook(c.addr) },
	})
	if rep != nil && len(rep.Drains) > 0 && rep.Drains[0] != nil {
		json.NewEncoder(os.Stderr).Encode(rep)
		fmt.Fprintf(out, "generation %d stopped: %s\n", rep.Generation, rep.Drains[0].Method)
	}
	return err
}

// newHandler answers every request with its generation and pid, and
// /metrics with hub (its drains and handoffs, the generation), the kernel
// counters and the listener's group. (/ready is Serve's.)
func newHandler(gen *atomic.Uint64, hub *stats.Hub, metrics promstats.Options) http.Handler {
	pid := strconv.Itoa(os.Getpid())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promstats.Handler(hub, metrics))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		g := strconv.FormatUint(gen.Load(), 10)
		w.Header().Set("X-Generation", g)
		w.Header().Set("X-PID", pid)
		fmt.Fprintf(w, "generation %s pid %s\n", g, pid)
	})
	return mux
}

// successor is the next generation: -exec, or this binary's path again (so a
// binary replaced on disk is what runs), with our arguments; it shares our
// stdout and stderr.
func successor(c *config) *exec.Cmd {
	bin := c.exec
	if bin == "" {
		bin, _ = os.Executable() // on error, the start fails and we keep serving
	}
	cmd := exec.Command(bin, c.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}
