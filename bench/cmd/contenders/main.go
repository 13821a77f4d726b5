package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/flipworker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/quicworker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/steerworker"
)

// options are the command's flags.
type options struct {
	concurrency []int
	contenders  []string
	reps        int
	out         string
	worker      string  // the worker binary; "" for zdworker beside this one, or this one
	headline    string  // with -headline: print the headline tables of this directory's results, run nothing
	into        string  // with -headline: write them into this file, between its markers, instead
	resummarize string  // write this output directory's summary again from its runs/*.json, run nothing
	base        runSpec // Restarts, Period, Lead, Tail, Window, Timeout, KeepAlive, Rate, Pool*
}

func main() {
	worker.Main()
	runChildMain()
	opts, err := parseFlags(os.Args[1:])
	if err == nil && opts.resummarize != "" {
		if err := resummarize(opts.resummarize); err != nil {
			fmt.Fprintln(os.Stderr, "contenders:", err)
			os.Exit(1)
		}
		return
	}
	if err == nil && opts.headline != "" {
		if err := headline(opts.headline, opts.into, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "contenders:", err)
			os.Exit(1)
		}
		return
	}
	if err == nil {
		opts.worker, err = findWorker(opts.worker, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "contenders:", err)
		os.Exit(2)
	}
	workerBin = opts.worker
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
	fs.StringVar(&o.headline, "headline", "", "print the headline tables (markdown) of the results in `dir`/MODE/results.{json,md} and exit; runs nothing")
	fs.StringVar(&o.into, "into", "", "with -headline: write the tables into `file` (BENCHMARKS.md) between its headline markers instead of printing them")
	fs.StringVar(&o.resummarize, "resummarize", "", "write `dir`'s results.md and results.json again from dir/runs/*.json (a run stopped before its end) and exit")
	fs.StringVar(&o.worker, "worker", "", "the worker `path`: a binary that calls worker.Main (default: "+workerName+" beside this binary, else this binary)")
	fs.IntVar(&o.base.Restarts, "restarts", 100, "restarts per run")
	fs.DurationVar(&o.base.Period, "period", 300*time.Millisecond, "steady load after each restart ends, before the next")
	fs.DurationVar(&o.base.Lead, "lead", 700*time.Millisecond, "steady load before the first restart")
	fs.DurationVar(&o.base.Tail, "tail", 700*time.Millisecond, "steady load after the last restart")
	fs.DurationVar(&o.base.Window, "window", 100*time.Millisecond, "buckets this close to a restart count as around it")
	fs.DurationVar(&o.base.Timeout, "timeout", 2*time.Second, "per-request timeout")
	fs.BoolVar(&o.base.KeepAlive, "keepalive", false, "reuse connections instead of one per request")
	fs.BoolVar(&o.base.TLS, "tls", false, "serve and load HTTPS (TLS, HTTP/1.1 from the load; a handshake per request unless -keepalive)")
	fs.BoolVar(&o.base.HTTP2, "h2", false, "load HTTP/2 over TLS (net/http's Transport, -h2-streams workers per connection); implies -tls")
	fs.IntVar(&o.base.StreamsPerConn, "h2-streams", 8, "with -h2: workers sharing each HTTP/2 connection")
	fs.BoolVar(&o.base.H3, "h3", false, "load HTTP/3 (quic-go's http3.Transport, -h2-streams workers per connection); runs the contenders that serve HTTP/3 only; implies -tls")
	fs.BoolVar(&o.base.H2load, "h2load", false, "load HTTP/2 with h2load (nghttp2, never retries) instead of net/http's Transport, one h2load run per restart; implies -h2")
	fs.BoolVar(&o.base.Post, "post", false, "every request a small POST net/http cannot replay (GetBody nil) instead of a GET; not with -pool, which always POSTs")
	fs.Float64Var(&o.base.Rate, "rate", 0, "open loop: this many requests per second (0: closed loop)")
	fs.IntVar(&o.base.Pool, "pool", 0, "a sparse keep-alive pool of this many clients, each on one connection of its own, instead of -c")
	interval := fs.String("pool-interval", "50ms-500ms", "with -pool: each client's interval between requests, `min-max`")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.base.Pool < 0 || o.base.Pool > 0 && (o.base.Rate > 0 || o.base.Post) {
		return o, errors.New("-pool must not be negative, nor set with -rate or -post")
	}
	if o.base.H2load {
		if o.base.Post || o.base.Rate > 0 {
			return o, errors.New("-h2load: h2load sends GETs in a closed loop; not with -post or -rate")
		}
		if _, err := exec.LookPath("h2load"); err != nil {
			return o, fmt.Errorf("-h2load needs h2load (apt-get install nghttp2-client): %w", err)
		}
		o.base.HTTP2 = true
	}
	if o.base.H3 {
		if o.base.HTTP2 || o.base.Pool > 0 || o.base.Rate > 0 || o.base.StreamsPerConn < 1 {
			return o, errors.New("-h3 needs -h2-streams of 1 or more, and no -h2, -h2load, -pool or -rate")
		}
		o.base.TLS = true
	}
	if o.base.HTTP2 {
		if o.base.Pool > 0 || o.base.StreamsPerConn < 1 {
			return o, errors.New("-h2 needs -h2-streams of 1 or more, and no -pool")
		}
		o.base.TLS = true
	} else if !o.base.H3 {
		o.base.StreamsPerConn = 0
	}
	lo, hi, err := parseInterval(*interval)
	if err != nil {
		return o, fmt.Errorf("-pool-interval: %w", err)
	}
	if o.base.Pool > 0 {
		o.base.PoolMin, o.base.PoolMax = lo, hi
		*conc = strconv.Itoa(o.base.Pool)
	}
	for _, f := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-c: bad concurrency %q", f)
		}
		o.concurrency = append(o.concurrency, n)
	}
	for _, s := range specs() {
		if *only == "" && (o.base.H3 && s.h3 || !o.base.H3 && !s.h3Only) || contains(strings.Split(*only, ","), s.name) {
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

// headline prints the headline tables of dir's results on w, or writes
// them into the file into.
func headline(dir, into string, w io.Writer) error {
	if into != "" {
		return headlineInto(dir, into)
	}
	runs, err := readHeadline(dir)
	if err != nil {
		return err
	}
	writeHeadline(w, runs)
	return nil
}

// parseInterval parses "min-max", two durations with min <= max.
func parseInterval(v string) (lo, hi time.Duration, err error) {
	a, b, ok := strings.Cut(v, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want min-max, such as 50ms-500ms", v)
	}
	if lo, err = time.ParseDuration(a); err == nil {
		hi, err = time.ParseDuration(b)
	}
	switch {
	case err != nil:
		return 0, 0, err
	case lo <= 0 || hi < lo:
		return 0, 0, fmt.Errorf("%q: want 0 < min <= max", v)
	}
	return lo, hi, nil
}

// workerName is the lean worker binary, cmd/zdworker. The worker modes that
// link more (eBPF, tableflip) run from the binaries beside it named
// workerName-mode: cmd/zdworker-steer and cmd/zdworker-tableflip.
const workerName = "zdworker"

// workerSuffixes are the modes that run from workerName-mode.
var workerSuffixes = []string{"steer", "tableflip", "quic"}

// findWorker returns the absolute path of the worker binary: path if set
// (which must exist), else workerName in the directory of this executable if
// its companions are there too, else this executable itself, with a note on
// stderr.
func findWorker(path string, stderr io.Writer) (string, error) {
	if path != "" {
		abs, err := filepath.Abs(path)
		if err != nil {
			return "", fmt.Errorf("-worker: %w", err)
		}
		if !isExec(abs) {
			return "", fmt.Errorf("-worker: %s is not an executable file", abs)
		}
		return abs, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(self)
	lean := filepath.Join(dir, workerName)
	var missing, pkgs []string
	for _, b := range append([]string{""}, workerSuffixes...) {
		name := workerName
		if b != "" {
			name += "-" + b
		}
		if !isExec(filepath.Join(dir, name)) {
			missing, pkgs = append(missing, name), append(pkgs, "./cmd/"+name)
		}
	}
	if len(missing) == 0 {
		return lean, nil
	}
	fmt.Fprintf(stderr, "contenders: no %s beside this binary (go build -o %s/ %s); workers run from %s, with the plotting packages' init\n",
		strings.Join(missing, ", "), dir, strings.Join(pkgs, " "), self)
	return self, nil
}

// isExec says whether path is an executable file.
func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
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
	linked := workerLinkage(workerBins(o.worker), w)
	fmt.Fprintln(w, "workers:", linked)
	fmt.Fprintln(w, "mode:", o.base.mode())
	start, loadStart := time.Now(), loadAverage()
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
	header := machine(os.Args, time.Since(start)) + "\nLoad average: " + loadStart + " at the start, " + loadAverage() +
		" at the end\n\nMode: " + o.base.mode() + "\n\nWorkers: " + linked + "\n"
	return writeSummary(o.out, header, all)
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
