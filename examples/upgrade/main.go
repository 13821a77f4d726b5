package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

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
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err = run(ctx, c, hup, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "upgrade example:", err)
		os.Exit(1)
	}
}

// run serves one generation: it inherits or creates the listener, serves,
// calls Ready, starts a successor on each value from hup, and drains once a
// successor is ready or ctx ends.
func run(ctx context.Context, c *config, hup <-chan os.Signal, out io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(c.socket), 0o700); err != nil {
		return err
	}
	hub := new(stats.Hub) // served on /metrics
	u, err := handoff.New(ctx, handoff.Config{
		Path:      c.socket,
		PIDFile:   filepath.Join(filepath.Dir(c.socket), "upgrade.pid"),
		OnHandoff: hub.HandoffHook(),
	})
	if err != nil {
		return err
	}
	defer u.Close()
	gen := u.Generation()
	ln, err := u.Listen(ctx, "http", "tcp", c.addr)
	if err != nil {
		return err
	}
	hub.SetGeneration(gen)
	srv := newServer(gen, hub, promstats.Options{Groups: []promstats.Group{{Listener: "http", Addr: ln.Addr().String()}}})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }() // takes ownership of ln
	if err := u.Ready(); err != nil {
		return errors.Join(fmt.Errorf("ready: %w", err), shutdown(srv, served, gen, c.grace, out))
	}
	fmt.Fprintf(out, "generation %d serving %s pid %d\n", gen, ln.Addr(), os.Getpid())
	for {
		select {
		case <-hup:
			if err := startSuccessor(c, out); err != nil {
				fmt.Fprintf(out, "generation %d: successor not started: %v\n", gen, err)
			}
			continue
		case <-u.Exit():
			fmt.Fprintf(out, "generation %d: successor ready, draining\n", gen)
		case <-ctx.Done():
			srv.Delay = c.delay // load balancers must notice; a successor needs no delay
		case err := <-served:
			return fmt.Errorf("serve: %w", err)
		}
		return shutdown(srv, served, gen, c.grace, out)
	}
}

// newServer answers every request with its generation and pid, /ready with
// the drain's readiness and /metrics with hub (its drains and handoffs, the
// generation), the kernel counters and the listener's group.
func newServer(gen uint64, hub *stats.Hub, metrics promstats.Options) *drain.Server {
	srv := &drain.Server{HTTP: &http.Server{ReadHeaderTimeout: 10 * time.Second}, OnReport: hub.DrainHook("http")}
	g, pid := strconv.FormatUint(gen, 10), strconv.Itoa(os.Getpid())
	mux := http.NewServeMux()
	mux.Handle("/ready", srv.Ready())
	mux.Handle("/metrics", promstats.Handler(hub, metrics))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Generation", g)
		w.Header().Set("X-PID", pid)
		fmt.Fprintf(w, "generation %s pid %s\n", g, pid)
	})
	srv.HTTP.Handler = mux
	return srv
}

// startSuccessor starts the next generation with our arguments; it shares our
// stdout and stderr. It is reaped here if it exits while we still run (a
// failed start: we keep serving); otherwise it outlives us.
func startSuccessor(c *config, out io.Writer) error {
	bin := c.exec
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, c.args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Fprintf(out, "started successor pid %d (%s)\n", cmd.Process.Pid, bin)
	go cmd.Wait()
	return nil
}

// shutdown drains srv within grace and prints its report on stderr.
func shutdown(srv *drain.Server, served <-chan error, gen uint64, grace time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	report, err := srv.Shutdown(ctx)
	if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("serve: %w", serr)
	}
	if report != nil {
		json.NewEncoder(os.Stderr).Encode(report)
		fmt.Fprintf(out, "generation %d stopped: %s\n", gen, report.Method)
	}
	return err
}
