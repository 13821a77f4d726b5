package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// config is the command line; the supervisor hands it to the workers.
type config struct {
	addr      string
	workers   int
	migration string        // "enable" or "require"
	grace     time.Duration // how long a worker may take to stop
	work      time.Duration // time each request takes
}

func main() {
	if isWorker() {
		os.Exit(workerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := supervisorMain(ctx, os.Args[1:], hup, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// supervisorMain parses the flags and runs the supervisor until ctx ends. Each
// value received on hup rolls the workers.
func supervisorMain(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	s, err := newSupervisor(c, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "workers: %v\n", err)
		return 1
	}
	if err := s.run(ctx, hup); err != nil {
		fmt.Fprintf(stderr, "workers: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("workers", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address every worker listens on")
	fs.IntVar(&c.workers, "workers", 4, "number of worker processes")
	fs.StringVar(&c.migration, "migration", "require", `net.ipv4.tcp_migrate_req policy: "require" (fail if 0) or "enable" (set it to 1, needs root)`)
	fs.DurationVar(&c.grace, "grace", 10*time.Second, "how long a stopping worker may take")
	fs.DurationVar(&c.work, "work", 0, "time each request takes (to see requests in flight during a restart)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.workers < 1 || c.workers > 64 {
		fmt.Fprintf(stderr, "workers: -workers %d: want 1 to 64\n", c.workers)
		return c, flag.ErrHelp
	}
	if c.migration != "enable" && c.migration != "require" {
		fmt.Fprintf(stderr, "workers: -migration %q: want enable or require\n", c.migration)
		return c, flag.ErrHelp
	}
	return c, nil
}
