package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

// envRole tells a process of this program which part it plays: unset (or
// roleMain) for the command the user runs, roleRunner for the process that
// runs inside the private network namespace, roleWorker for a server.
const envRole = "ZERODROP_ROLLOUT_ROLE"

const (
	roleMain   = "main"
	roleRunner = "runner"
	roleWorker = "worker"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// config is what the flags say.
type config struct {
	Duration    time.Duration `json:"duration_ms"`
	Concurrency int           `json:"concurrency"`
	Workers     int           `json:"workers"`
	Restarts    int           `json:"restarts"`
	Strategies  []string      `json:"strategies"`
	JSON        bool          `json:"-"`
	Metrics     bool          `json:"-"`
	Timeout     time.Duration `json:"timeout_ms"`
	Clients     string        `json:"clients"` // clientsNew, clientsKeepAlive or clientsPool
	TLS         bool          `json:"tls"`
}

// The kinds of clients (--clients).
const (
	clientsNew       = "new"       // a new connection per request
	clientsKeepAlive = "keepalive" // one connection per client, requests back to back
	clientsPool      = "pool"      // a sparse keep-alive pool: one connection per client, idle 50-500 ms between requests
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run dispatches on the role of this process and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	switch os.Getenv(envRole) {
	case roleWorker:
		return workerMain(stdout, stderr)
	case roleRunner:
		cfg, err := parseFlags(args, stderr)
		if err != nil {
			return exitUsage
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return runnerMain(ctx, cfg, stdout, stderr)
	case "", roleMain:
		if _, err := parseFlags(args, stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		return enterNamespace(args, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "rollout: unknown %s=%q\n", envRole, os.Getenv(envRole))
		return exitUsage
	}
}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&cfg.Duration, "duration", 8*time.Second, "load duration per strategy")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "clients")
	fs.StringVar(&cfg.Clients, "clients", clientsNew, "what the clients do: new (a new connection per request), keepalive (one connection each, requests back to back), pool (one connection each, idle 50-500 ms between POSTs)")
	fs.BoolVar(&cfg.TLS, "tls", false, "serve and request over TLS (a certificate made for the run)")
	fs.IntVar(&cfg.Workers, "workers", 4, "server processes in the reuseport group (handoff always runs one)")
	fs.IntVar(&cfg.Restarts, "restarts", 8, "restarts per strategy, evenly spread over the duration")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "bound on each request, connect included")
	list := fs.String("strategies", strings.Join(defaultStrategies(), ","), "comma-separated strategies: "+strings.Join(strategyNames(), ", "))
	fs.BoolVar(&cfg.JSON, "json", false, "print one JSON object instead of the table")
	fs.BoolVar(&cfg.Metrics, "metrics", false, "after each strategy, scrape one server's /metrics and print its zerodrop_ samples (in --json: metrics)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./cmd/rollout [flags]\n\n%s\n\nflags:\n", usageText)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, usageError(fs, fmt.Sprintf("unexpected argument %q", fs.Arg(0)))
	}
	for _, name := range strings.Split(*list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if _, ok := strategies[name]; !ok {
			return cfg, usageError(fs, fmt.Sprintf("unknown strategy %q (have: %s)", name, strings.Join(strategyNames(), ", ")))
		}
		if !slices.Contains(cfg.Strategies, name) {
			cfg.Strategies = append(cfg.Strategies, name)
		}
	}
	switch {
	case len(cfg.Strategies) == 0:
		return cfg, usageError(fs, "no strategy to run")
	case cfg.Duration < time.Second || cfg.Duration > 10*time.Minute:
		return cfg, usageError(fs, "--duration must be between 1s and 10m")
	case cfg.Concurrency < 1 || cfg.Concurrency > 4096:
		return cfg, usageError(fs, "--concurrency must be between 1 and 4096")
	case cfg.Workers < 2 || cfg.Workers > 64:
		return cfg, usageError(fs, "--workers must be between 2 and 64 (a group needs siblings)")
	case cfg.Restarts < 0 || cfg.Restarts > 1000:
		return cfg, usageError(fs, "--restarts must be between 0 and 1000")
	case cfg.Timeout < 100*time.Millisecond:
		return cfg, usageError(fs, "--timeout must be at least 100ms")
	case cfg.Clients != clientsNew && cfg.Clients != clientsKeepAlive && cfg.Clients != clientsPool:
		return cfg, usageError(fs, fmt.Sprintf("unknown --clients %q (have: new, keepalive, pool)", cfg.Clients))
	}
	return cfg, nil
}

func usageError(fs *flag.FlagSet, msg string) error {
	fmt.Fprintf(fs.Output(), "rollout: %s\n", msg)
	fs.Usage()
	return errors.New(msg)
}

const usageText = `Rolls HTTP servers under load in a private network namespace, once per
strategy, and counts the requests each way of restarting loses:

  close    plain SO_REUSEPORT workers stopped with http.Server.Shutdown,
           net.ipv4.tcp_migrate_req=0 (what most servers do today)
  migrate  reuseport listeners, tcp_migrate_req=1, drain's lossless stop
  handoff  one server upgraded in place: its successor inherits the
           listening socket over a unix socket (package handoff)
  ebpf     reuseport workers in an SK_REUSEPORT program (reuseport/steer):
           the stopping worker gets no new connection, drains, closes;
           tcp_migrate_req=0 (needs root)
  cpu      reuseport workers with SO_INCOMING_CPU: the stopping worker
           steps out of the kernel's pick, drains, closes;
           tcp_migrate_req=0, no privilege (Linux 6.1+)

With --clients keepalive or pool, the table also counts the reconnections
per restart: handoff passes each idle keep-alive connection to its
successor (its client notices nothing), the others close them and their
clients dial again; with --tls, handoff passes idle TLS 1.3 connections
with their session (package tlsresume). A connection a client closed by
itself (no failed read, no Connection: close: net/http's Transport does
when starved of CPU) and dialled again is not counted.

Runs in new network and mount namespaces (as root) or, otherwise, in a new
user namespace as well. The machine's own sysctls and ports are never
touched.`
