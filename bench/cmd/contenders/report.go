package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// classes are the failure classes, in the order tables show them.
var classes = []load.Class{load.Reset, load.Refused, load.EOF, load.Timeout, load.Status, load.Other}

// summary is one row of the table: a contender at one concurrency, over
// every repetition. Latencies are medians over the repetitions.
type summary struct {
	Contender     string               `json:"contender"`
	About         string               `json:"about"`
	Concurrency   int                  `json:"concurrency"`
	Reps          int                  `json:"reps"`
	Restarts      int                  `json:"restarts"`
	RestartMS     float64              `json:"restart_ms_median"` // one restart, start to done
	RestartMSMax  float64              `json:"restart_ms_max"`
	Requests      int64                `json:"requests"`
	Failed        int64                `json:"failed"`
	FailedPerRep  []int64              `json:"failed_per_rep"`
	FailedByClass map[load.Class]int64 `json:"failed_by_class"`
	P50Steady     float64              `json:"p50_ms_steady"`
	P99Steady     float64              `json:"p99_ms_steady"`
	MaxSteady     float64              `json:"max_ms_steady"`
	P50Restart    float64              `json:"p50_ms_restart"`
	P99Restart    float64              `json:"p99_ms_restart"`
	MaxRestart    float64              `json:"max_ms_restart"`
	Counters      reuseport.Counters   `json:"counters"`
	// Pool is the clients of a keep-alive pool run (0 otherwise); Dials
	// the connections they opened. Each client dials once unless the
	// server closes its connection: ReconnectsPerRestart is (Dials - Pool
	// per repetition) / Restarts.
	Pool                 int     `json:"pool,omitempty"`
	Dials                int64   `json:"dials"`
	DialsPerRep          []int64 `json:"dials_per_rep"`
	ReconnectsPerRestart float64 `json:"reconnects_per_restart"`
	// HTTP2 marks the runs of HTTP/2 load; Retried counts the requests
	// net/http's Transport sent more than once (a stream refused or above a
	// GOAWAY's last stream id, sent again on another connection).
	HTTP2         bool    `json:"http2,omitempty"`
	Retried       int64   `json:"retried"`
	RetriedPerRep []int64 `json:"retried_per_rep"`
	// H2load marks the runs loaded by h2load (Requests and Failed are then
	// its done and failed streams); H2loadTotal sums its request lines,
	// FailingRestarts counts the restarts whose h2load run failed a stream.
	H2load          bool             `json:"h2load,omitempty"`
	H2loadTotal     netnstest.H2load `json:"h2load_total"`
	FailingRestarts int              `json:"failing_restarts,omitempty"`
	// TLS handshakes the Go workers served, full and resumed, over the
	// repetitions that report them (TLSReps); ResumedShare is resumed /
	// reconnections (every handshake but each client's first: Concurrency
	// per repetition), FullPerRestart is (full - Concurrency per
	// repetition) / restarts.
	// H3 marks the runs of HTTP/3 load; QUIC sums what their workers and
	// clients reported, ForwardedPerRestart is QUIC.Forwarded / Restarts.
	H3                  bool       `json:"h3,omitempty"`
	QUIC                quicResult `json:"quic"`
	ForwardedPerRestart float64    `json:"forwarded_per_restart,omitempty"`
	HandshakesFull      int64      `json:"handshakes_full,omitempty"`
	HandshakesResumed   int64      `json:"handshakes_resumed,omitempty"`
	TLSReps             int        `json:"tls_reps,omitempty"`
	ResumedShare        float64    `json:"resumed_share,omitempty"`
	FullPerRestart      float64    `json:"full_handshakes_per_restart,omitempty"`
	// The Go workers' CPU time (user + system), over the repetitions that
	// report it (CPUReps): CPUSteady is µs of CPU per request answered in
	// the steady phase; CPUPerRestart the restart phase's CPU / restarts
	// (ms), and CPUExcessPerRestart that minus what its requests cost at
	// the steady rate, / restarts (ms): what a restart cost beyond serving.
	CPUReps             int      `json:"cpu_reps,omitempty"`
	CPUSteady           float64  `json:"cpu_steady_ms_per_s,omitempty"`
	CPUPerRestart       float64  `json:"cpu_ms_per_restart,omitempty"`
	CPUExcessPerRestart float64  `json:"cpu_excess_ms_per_restart,omitempty"`
	cpu                 cpuUse   // summed over CPUReps
	cpuRestarts         int      // the restarts of CPUReps
	Skipped             string   `json:"skipped,omitempty"`
	Errors              []string `json:"errors,omitempty"`
}

// summarize groups runs by contender and concurrency, in the order they ran.
func summarize(runs []runResult) []summary {
	var out []summary
	idx := map[string]int{}
	for _, r := range runs {
		key := fmt.Sprintf("%s/%d", r.Spec.Contender, r.Spec.Concurrency)
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			sp, _ := findSpec(r.Spec.Contender)
			out = append(out, summary{Contender: r.Spec.Contender, About: sp.about,
				Concurrency: r.Spec.Concurrency, FailedByClass: map[load.Class]int64{}})
		}
		out[i].add(r)
	}
	for i := range out {
		out[i].finish(runs)
	}
	return out
}

func (s *summary) add(r runResult) {
	s.Reps++
	if r.Skipped != "" {
		s.Skipped = r.Skipped
		return
	}
	if r.Error != "" {
		s.Errors = append(s.Errors, fmt.Sprintf("rep %d: %s", r.Spec.Rep, r.Error))
	}
	s.Restarts += r.Restarts
	if q := r.QUIC; q != nil {
		s.H3 = true
		s.QUIC.Forwarded += q.Forwarded
		s.QUIC.Told += q.Told
		s.QUIC.Finished += q.Finished
		s.QUIC.Forced += q.Forced
		s.QUIC.Resets += q.Resets
		s.QUIC.Retried += q.Retried
		s.QUIC.ForcedAtStop += q.ForcedAtStop
	}
	if h := r.Handshakes; h != nil {
		s.HandshakesFull += h.Full
		s.HandshakesResumed += h.Resumed
		s.TLSReps++
	}
	if u := r.CPU; u != nil && r.Restarts > 0 {
		s.cpu.SteadyNS += u.SteadyNS
		s.cpu.SteadyMS += u.SteadyMS
		s.cpu.SteadyRequests += u.SteadyRequests
		s.cpu.RestartsRequests += u.RestartsRequests
		s.cpu.RestartsNS += u.RestartsNS
		s.cpu.RestartsMS += u.RestartsMS
		s.cpuRestarts += r.Restarts
		s.CPUReps++
	}
	c := &s.Counters
	d := r.Counters
	c.MigrateReqSuccess += d.MigrateReqSuccess
	c.MigrateReqFailure += d.MigrateReqFailure
	c.ListenOverflows += d.ListenOverflows
	c.ListenDrops += d.ListenDrops
	c.OutRsts += d.OutRsts
	c.EstabResets += d.EstabResets
	if h := r.H2load; h != nil {
		s.H2load = true
		s.H2loadTotal.Add(h.Total)
		s.FailingRestarts += len(h.Failing)
		s.Requests += int64(h.Total.Done)
		s.Failed += int64(h.Total.Failed)
		s.FailedPerRep = append(s.FailedPerRep, int64(h.Total.Failed))
		return
	}
	if r.Load == nil {
		return
	}
	s.Requests += r.Load.Requests
	s.Failed += r.Load.Failed
	s.FailedPerRep = append(s.FailedPerRep, r.Load.Failed)
	s.Pool = r.Load.Pool
	s.Dials += r.Load.Dials
	s.DialsPerRep = append(s.DialsPerRep, r.Load.Dials)
	s.HTTP2 = r.Spec.HTTP2
	s.Retried += r.Load.Retried
	s.RetriedPerRep = append(s.RetriedPerRep, r.Load.Retried)
	for k, v := range r.Load.FailedByClass {
		s.FailedByClass[k] += v
	}
}

// finish computes the medians of the latencies over s's runs.
func (s *summary) finish(runs []runResult) {
	var f [6][]float64
	var took []float64
	for _, r := range runs {
		if r.Spec.Contender != s.Contender || r.Spec.Concurrency != s.Concurrency {
			continue
		}
		took = append(took, r.RestartMS...)
		if r.Load == nil {
			continue
		}
		l := r.Load
		for i, v := range []float64{l.P50MSSteady, l.P99MSSteady, l.MaxMSSteady,
			l.P50MSRestart, l.P99MSRestart, l.MaxMSRestart} {
			f[i] = append(f[i], v)
		}
	}
	s.P50Steady, s.P99Steady, s.MaxSteady = median(f[0]), median(f[1]), median(f[2])
	s.P50Restart, s.P99Restart, s.MaxRestart = median(f[3]), median(f[4]), median(f[5])
	s.RestartMS = median(took)
	if len(took) > 0 {
		s.RestartMSMax = slices.Max(took)
	}
	if s.H3 && s.Restarts > 0 {
		s.ForwardedPerRestart = float64(s.QUIC.Forwarded) / float64(s.Restarts)
	}
	if s.Pool > 0 && s.Restarts > 0 {
		s.ReconnectsPerRestart = float64(s.Dials-int64(s.Pool*len(s.DialsPerRep))) / float64(s.Restarts)
	}
	first := int64(s.Concurrency * s.TLSReps) // each client's first handshake
	if re := s.HandshakesFull + s.HandshakesResumed - first; s.TLSReps > 0 && re > 0 {
		s.ResumedShare = float64(s.HandshakesResumed) / float64(re)
	}
	if s.TLSReps > 0 && s.Restarts > 0 {
		s.FullPerRestart = float64(s.HandshakesFull-first) / float64(s.Restarts)
	}
	if u := s.cpu; s.CPUReps > 0 && u.SteadyRequests > 0 && s.cpuRestarts > 0 {
		perReq := float64(u.SteadyNS) / float64(u.SteadyRequests) // ns of CPU per request
		s.CPUSteady = perReq / 1e3
		s.CPUPerRestart = float64(u.RestartsNS) / 1e6 / float64(s.cpuRestarts)
		s.CPUExcessPerRestart = (float64(u.RestartsNS) - perReq*float64(u.RestartsRequests)) / 1e6 / float64(s.cpuRestarts)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// writeMarkdown writes the tables.
func writeMarkdown(w io.Writer, rows []summary) {
	fmt.Fprintln(w, "| contender | c | restarts | restart ms (median / max) | requests | failed (per rep) | failures by class | p50 / p99 / max steady ms | p50 / p99 / max around restarts ms | p99 ratio |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range rows {
		if s.Skipped != "" {
			fmt.Fprintf(w, "| %s | %d | skipped: %s ||||||||\n", s.Contender, s.Concurrency, s.Skipped)
			continue
		}
		// h2load's runs measure no latency of ours: no steady load, no buckets.
		steady, around, ratio, classes := "-", "-", "-", classList(s.FailedByClass)
		if s.H2load {
			classes = h2loadClasses(s.H2loadTotal)
		} else {
			steady = fmt.Sprintf("%.2f / %.2f / %.1f", s.P50Steady, s.P99Steady, s.MaxSteady)
			around = fmt.Sprintf("%.2f / %.2f / %.1f", s.P50Restart, s.P99Restart, s.MaxRestart)
		}
		if s.P99Steady > 0 {
			ratio = fmt.Sprintf("%.2f", s.P99Restart/s.P99Steady)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %.0f / %.0f | %d | %d (%s) | %s | %s | %s | %s |\n",
			s.Contender, s.Concurrency, s.Restarts, s.RestartMS, s.RestartMSMax, s.Requests, s.Failed, joinInts(s.FailedPerRep),
			classes, steady, around, ratio)
	}
	writePool(w, rows)
	writeHandshakes(w, rows)
	writeHTTP2(w, rows)
	writeH2load(w, rows)
	writeH3(w, rows)
	fmt.Fprintln(w, "\nKernel counters, deltas summed over the repetitions (each run in its own namespace):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| contender | c | MigrateReqSuccess | MigrateReqFailure | ListenOverflows | ListenDrops | Tcp.OutRsts | Tcp.EstabResets |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, s := range rows {
		if s.Skipped != "" {
			continue
		}
		c := s.Counters
		fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %d | %d | %d |\n", s.Contender, s.Concurrency,
			c.MigrateReqSuccess, c.MigrateReqFailure, c.ListenOverflows, c.ListenDrops, c.OutRsts, c.EstabResets)
	}
	fmt.Fprintln(w, "\nContenders:")
	fmt.Fprintln(w)
	seen := map[string]bool{}
	for _, s := range rows {
		if !seen[s.Contender] {
			seen[s.Contender] = true
			fmt.Fprintf(w, "- `%s`: %s\n", s.Contender, s.About)
		}
	}
	for _, s := range rows {
		for _, e := range s.Errors {
			fmt.Fprintf(w, "- error, %s c=%d %s\n", s.Contender, s.Concurrency, e)
		}
	}
}

// writePool writes the table of the keep-alive pool runs, if any: failed
// requests and the connections the clients opened again.
func writePool(w io.Writer, rows []summary) {
	writeExtra(w, rows, func(s summary) bool { return s.Pool > 0 },
		"Keep-alive pool: each client dials once unless the server closes its connection; reconnects per restart = (dials - clients per repetition) / restarts:",
		"| contender | clients | restarts | failed (per rep) | dials (per rep) | reconnects per restart |",
		func(s summary) string {
			return fmt.Sprintf("| %s | %d | %d | %d (%s) | %d (%s) | %.2f |", s.Contender, s.Pool, s.Restarts,
				s.Failed, joinInts(s.FailedPerRep), s.Dials, joinInts(s.DialsPerRep), s.ReconnectsPerRestart)
		})
}

// writeHandshakes writes the table of the TLS handshakes the Go workers
// served, if any reported them.
func writeHandshakes(w io.Writer, rows []summary) {
	writeExtra(w, rows, func(s summary) bool { return s.TLSReps > 0 },
		"TLS handshakes the Go workers served (server side: DidResume); reconnections = handshakes - c per repetition (each client's first is full), resumed share = resumed / reconnections, full per restart = (full - c per repetition) / restarts. "+
			"Server CPU (the workers' user + system time: /proc/PID/stat while they run, getrusage at exit): steady = µs of CPU per request answered from half the lead until the first restart; per restart = CPU from the first restart until the tail's end / restarts; excess = that minus what the phase's requests cost at the steady rate, / restarts (- when not reported):",
		"| contender | c | restarts | full | resumed | reconnections resumed | full handshakes per restart | CPU steady µs/request | CPU per restart ms | CPU excess per restart ms |",
		func(s summary) string {
			cpu := "- | - | -"
			if s.CPUReps > 0 {
				cpu = fmt.Sprintf("%.1f | %.1f | %.1f", s.CPUSteady, s.CPUPerRestart, s.CPUExcessPerRestart)
			}
			return fmt.Sprintf("| %s | %d | %d | %d | %d | %.1f%% | %.1f | %s |", s.Contender, s.Concurrency, s.Restarts,
				s.HandshakesFull, s.HandshakesResumed, 100*s.ResumedShare, s.FullPerRestart, cpu)
		})
}

// writeHTTP2 writes the table of the HTTP/2 runs, if any: failed requests,
// the requests the Transport sent again, and the connections dialled.
func writeHTTP2(w io.Writer, rows []summary) {
	writeExtra(w, rows, func(s summary) bool { return s.HTTP2 },
		"HTTP/2: a request counts once, failed if its last try failed; retried = requests net/http's Transport sent again on another connection (a stream refused, or above a GOAWAY's last stream id):",
		"| contender | c | restarts | failed (per rep) | retried (per rep) | dials (per rep) |",
		func(s summary) string {
			return fmt.Sprintf("| %s | %d | %d | %d (%s) | %d (%s) | %d (%s) |", s.Contender, s.Concurrency, s.Restarts,
				s.Failed, joinInts(s.FailedPerRep), s.Retried, joinInts(s.RetriedPerRep), s.Dials, joinInts(s.DialsPerRep))
		})
}

// writeH3 writes the table of the HTTP/3 runs, if any.
func writeH3(w io.Writer, rows []summary) {
	writeExtra(w, rows, func(s summary) bool { return s.H3 },
		"HTTP/3: stateless resets = failed requests whose connection the client saw reset (quic.StatelessResetError); rejected, sent again = POSTs the server refused unprocessed (H3_REQUEST_REJECTED) that quic-go's client sent again (it retries nothing else); forwarded = datagrams a successor forwarded to its predecessor (zd-h3, zd-h3-pool), per restart; told / finished / forced = connections the quicdrain generations sent a GOAWAY, saw their clients close, closed at the grace when a successor took over (those closed at the harness's final stop, after the load, are not counted):",
		"| contender | c | restarts | failed (per rep) | stateless resets | rejected, sent again | datagrams forwarded | forwarded per restart | told / finished / forced |",
		func(s summary) string {
			q := s.QUIC
			return fmt.Sprintf("| %s | %d | %d | %d (%s) | %d | %d | %d | %.1f | %d / %d / %d |", s.Contender, s.Concurrency, s.Restarts,
				s.Failed, joinInts(s.FailedPerRep), q.Resets, q.Retried, q.Forwarded, s.ForwardedPerRestart, q.Told, q.Finished, q.Forced)
		})
}

// writeH2load writes the table of the h2load runs, if any.
func writeH2load(w io.Writer, rows []summary) {
	writeExtra(w, rows, func(s summary) bool { return s.H2load },
		"h2load, one run per restart (h2load never retries; failed = streams without a 2xx answer, errored = those that failed below HTTP, such as a stream refused or above a GOAWAY's last stream id; in flight at the end = started - done, streams still open when a run's time was up, counted neither way):",
		"| contender | c | restarts | streams done | failed (per rep) | errored | timeout | restarts with a failed stream | in flight at the end |",
		func(s summary) string {
			h := s.H2loadTotal
			return fmt.Sprintf("| %s | %d | %d | %d | %d (%s) | %d | %d | %d | %d |", s.Contender, s.Concurrency, s.Restarts,
				h.Done, h.Failed, joinInts(s.FailedPerRep), h.Errored, h.Timeout, s.FailingRestarts, h.Started-h.Done)
		})
}

// writeExtra writes a table of the rows that ran and that pick selects, if
// any: intro, then the header line, then a line per row.
func writeExtra(w io.Writer, rows []summary, pick func(summary) bool, intro, header string, line func(summary) string) {
	head := false
	for _, s := range rows {
		if s.Skipped != "" || !pick(s) {
			continue
		}
		if !head {
			head = true
			cols := strings.Count(header, "|") - 1
			fmt.Fprintf(w, "\n%s\n\n%s\n|%s\n", intro, header, strings.Repeat("---|", cols))
		}
		fmt.Fprintln(w, line(s))
	}
}

func joinInts(v []int64) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, "/")
}

// h2loadClasses is classList for h2load's counts: of its failed streams,
// those that failed below HTTP (errored, a subset of failed) and those
// answered with a status that is not a success. Its timeouts are in the
// h2load table.
func h2loadClasses(h netnstest.H2load) string {
	var s []string
	if h.Errored > 0 {
		s = append(s, fmt.Sprintf("errored %d", h.Errored))
	}
	if n := h.Failed - h.Errored; n > 0 {
		s = append(s, fmt.Sprintf("status %d", n))
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

func classList(m map[load.Class]int64) string {
	var s []string
	for _, c := range classes {
		if m[c] > 0 {
			s = append(s, fmt.Sprintf("%s %d", c, m[c]))
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

// machine describes where and how the figures were made.
func machine(args []string, took time.Duration) string {
	var u unix.Utsname
	unix.Uname(&u)
	return fmt.Sprintf("Machine: %d CPUs (nproc), kernel %s, %s; %s UTC, took %v.\n\nCommand: `%s`\n",
		runtime.NumCPU(), unix.ByteSliceToString(u.Release[:]), runtime.Version(),
		time.Now().UTC().Format("2006-01-02 15:04"), took.Round(time.Second), strings.Join(args, " "))
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, from
// /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// writeSummary writes results.md and results.json in dir.
func writeSummary(dir, header string, runs []runResult) error {
	rows := summarize(runs)
	var b strings.Builder
	b.WriteString(header + "\n")
	writeMarkdown(&b, rows)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "results.json"), j, 0o644)
}

// progressLine is one line per run, for the terminal.
func progressLine(r runResult) string {
	s := r.Spec
	head := fmt.Sprintf("%-22s c=%-4d rep %d:", s.Contender, s.Concurrency, s.Rep)
	switch {
	case r.Skipped != "":
		return head + " skipped: " + r.Skipped
	case r.H2load != nil:
		line := fmt.Sprintf("%s %d restarts (median %.0f ms), h2load %v, %d restarts with a failed stream",
			head, r.Restarts, median(r.RestartMS), r.H2load.Total, len(r.H2load.Failing))
		if r.Error != "" {
			line += "; error: " + r.Error
		}
		return line
	case r.Load == nil:
		return head + " error: " + r.Error
	}
	l := r.Load
	line := fmt.Sprintf("%s %d restarts (median %.0f ms), %d requests, %d failed (%s), p99 steady %.2f ms, around restarts %.2f ms",
		head, r.Restarts, median(r.RestartMS), l.Requests, l.Failed, classList(l.FailedByClass), l.P99MSSteady, l.P99MSRestart)
	if l.Pool > 0 {
		line += fmt.Sprintf(", %d dials by %d clients", l.Dials, l.Pool)
	}
	if s.HTTP2 {
		line += fmt.Sprintf(", %d retried, %d dials", l.Retried, l.Dials)
	}
	if q := r.QUIC; q != nil {
		line += fmt.Sprintf(", %d stateless resets, %d rejected and sent again, %d datagrams forwarded, %d/%d/%d told/finished/forced (%d forced at the final stop)",
			q.Resets, q.Retried, q.Forwarded, q.Told, q.Finished, q.Forced, q.ForcedAtStop)
	}
	if r.Error != "" {
		line += "; error: " + r.Error
	}
	return line
}
