package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// options are the command's flags.
type options struct {
	concurrency []int
	contenders  []string
	reps        int
	out         string
	base        runSpec // Restarts, Period, Lead, Tail, Window, Timeout, KeepAlive, Rate
}

func main() {
	workerMain()
	runChildMain()
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "contenders:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := bench(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "contenders:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("contenders", flag.ContinueOnError)
	var o options
	conc := fs.String("c", "64,256", "concurrencies, comma-separated: closed-loop workers, or the most requests in flight with -rate")
	only := fs.String("only", "", "contenders to run, comma-separated (default: all)")
	fs.IntVar(&o.reps, "reps", 1, "repetitions")
	fs.StringVar(&o.out, "o", "bench-out", "output `directory`")
	fs.IntVar(&o.base.Restarts, "restarts", 100, "restarts per run")
	fs.DurationVar(&o.base.Period, "period", 300*time.Millisecond, "steady load after each restart ends, before the next")
	fs.DurationVar(&o.base.Lead, "lead", 700*time.Millisecond, "steady load before the first restart")
	fs.DurationVar(&o.base.Tail, "tail", 700*time.Millisecond, "steady load after the last restart")
	fs.DurationVar(&o.base.Window, "window", 100*time.Millisecond, "buckets this close to a restart count as around it")
	fs.DurationVar(&o.base.Timeout, "timeout", 2*time.Second, "per-request timeout")
	fs.BoolVar(&o.base.KeepAlive, "keepalive", false, "reuse connections instead of one per request")
	fs.Float64Var(&o.base.Rate, "rate", 0, "open loop: this many requests per second (0: closed loop)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-c: bad concurrency %q", f)
		}
		o.concurrency = append(o.concurrency, n)
	}
	for _, s := range specs() {
		if *only == "" || contains(strings.Split(*only, ","), s.name) {
			o.contenders = append(o.contenders, s.name)
		}
	}
	if len(o.contenders) == 0 {
		return o, fmt.Errorf("-only %q: no such contender", *only)
	}
	if o.reps < 1 || o.base.Restarts < 0 || o.base.Period <= 0 {
		return o, errors.New("-reps must be positive, -restarts not negative, -period positive")
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.TrimSpace(v) == s {
			return true
		}
	}
	return false
}

// bench runs every (repetition, concurrency, contender) and writes the
// results to o.out, with progress on w.
func bench(ctx context.Context, o options, w io.Writer) error {
	runs := filepath.Join(o.out, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(o.out, "workers.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	start := time.Now()
	var all []runResult
	for rep := 1; rep <= o.reps; rep++ {
		for _, c := range o.concurrency {
			for _, name := range o.contenders {
				s := o.base
				s.Contender, s.Concurrency, s.Rep = name, c, rep
				res, err := spawnRun(ctx, s, logf)
				if err != nil {
					res = runResult{Spec: s, Error: err.Error()}
				}
				fmt.Fprintln(w, progressLine(res))
				if err := saveRun(runs, res); err != nil {
					return err
				}
				all = append(all, res)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	return writeSummary(o.out, machine(os.Args, time.Since(start)), all)
}

// saveRun writes a run's JSON and plot.
func saveRun(dir string, r runResult) error {
	base := filepath.Join(dir, fmt.Sprintf("%s-c%d-r%d", r.Spec.Contender, r.Spec.Concurrency, r.Spec.Rep))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", b, 0o644); err != nil {
		return err
	}
	if r.Load == nil {
		return nil
	}
	return plotRun(base+".svg", r)
}
