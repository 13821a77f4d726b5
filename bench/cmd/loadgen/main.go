// Command loadgen drives HTTP load with package load and prints what it
// measured.
//
//	go run ./cmd/loadgen -url http://127.0.0.1:8080/ -c 64 -d 10s
//	go run ./cmd/loadgen -rate 2000 -d 5s -restart-every 1s -json
//
// Without -url it serves a demo server on 127.0.0.1 itself; -restart-every then
// restarts that server the naive way (close, listen again), marks each restart,
// and shows what the load saw around them. Keep the load on loopback: the
// harness is meant for servers on this machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
)

func main() {
	var cfg load.Config
	flag.StringVar(&cfg.URL, "url", "", "target `URL`; empty serves a demo server on 127.0.0.1")
	flag.IntVar(&cfg.Concurrency, "c", 16, "closed loop: workers; open loop: most requests in flight")
	flag.Float64Var(&cfg.Rate, "rate", 0, "open loop at this many requests per second")
	flag.DurationVar(&cfg.Duration, "d", 5*time.Second, "how long to send")
	flag.Int64Var(&cfg.Requests, "n", 0, "most requests to send (0: no limit)")
	flag.DurationVar(&cfg.Timeout, "timeout", 2*time.Second, "per-request timeout")
	flag.BoolVar(&cfg.KeepAlive, "keepalive", false, "reuse connections")
	flag.BoolVar(&cfg.Transport, "transport", false, "use net/http's Transport")
	flag.StringVar(&cfg.Header, "header", "X-Generation", "response header to count by value")
	every := flag.Duration("restart-every", 0, "demo server only: restart it this often, marking each restart")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, cfg, *every, *asJSON); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, cfg load.Config, every time.Duration, asJSON bool) error {
	var demo *demoServer
	if cfg.URL == "" {
		var err error
		if demo, err = startDemo(); err != nil {
			return err
		}
		defer demo.close()
		cfg.URL = "http://" + demo.addr + "/"
	} else if every > 0 {
		return fmt.Errorf("-restart-every needs the demo server (no -url)")
	}
	g, err := load.New(cfg)
	if err != nil {
		return err
	}
	restarts := make(chan error, 1)
	rctx, cancel := context.WithCancel(ctx)
	if demo != nil && every > 0 {
		go func() { restarts <- demo.restartEvery(rctx, every, g.Mark) }()
	} else {
		restarts <- nil
	}
	res, err := g.Run(ctx)
	cancel()
	if rerr := <-restarts; rerr != nil && err == nil {
		err = rerr
	}
	if res != nil {
		if asJSON {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(res); err == nil {
				err = jerr
			}
		} else {
			report(w, res)
		}
	}
	return err
}

// classes are the failure classes, in the order reports show them.
var classes = []load.Class{load.Reset, load.Refused, load.EOF, load.Timeout, load.Status, load.Other}

func report(w io.Writer, r *load.Result) {
	fmt.Fprintf(w, "%d requests in %.1f s (%.0f/s), %d failed", r.Requests, r.DurationMS/1000,
		float64(r.Requests)/r.DurationMS*1000, r.Failed)
	for _, c := range classes {
		if n := r.FailedByClass[c]; n > 0 {
			fmt.Fprintf(w, ", %s %d", c, n)
		}
	}
	fmt.Fprintf(w, "\nlatency ms   %8s %8s %8s\n", "p50", "p99", "max")
	fmt.Fprintf(w, "  all        %8.3f %8.3f %8.3f\n", r.P50MS, r.P99MS, r.MaxMS)
	fmt.Fprintf(w, "  steady     %8.3f %8.3f %8.3f\n", r.P50MSSteady, r.P99MSSteady, r.MaxMSSteady)
	fmt.Fprintf(w, "  restart    %8.3f %8.3f %8.3f\n", r.P50MSRestart, r.P99MSRestart, r.MaxMSRestart)
	fmt.Fprintf(w, "%d marks", len(r.Marks))
	var lost int64
	for _, m := range r.Marks {
		lost += m.Failed
	}
	if len(r.Marks) > 0 {
		fmt.Fprintf(w, ", %d failed requests around them", lost)
	}
	fmt.Fprintln(w)
	values := make([]string, 0, len(r.Headers))
	for v := range r.Headers {
		values = append(values, v)
	}
	sort.Strings(values)
	for _, v := range values {
		fmt.Fprintf(w, "  header %q: %d replies\n", v, r.Headers[v])
	}
	for _, c := range classes {
		if e, ok := r.Errors[c]; ok {
			fmt.Fprintf(w, "  first %s: %s\n", c, e)
		}
	}
}
