package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// headlineModes are the client kinds of the headline tables, in their order:
// the directory each one's results.md and results.json sit in, and its title.
var headlineModes = []struct{ dir, title string }{
	{"new-conn", "Plain HTTP/1.1, a new connection per request"},
	{"keepalive", "Plain HTTP/1.1, keep-alive"},
	{"pool", "Sparse keep-alive pool (a proxy's upstream connections)"},
	{"tls-new-conn", "HTTPS, a new connection and a full handshake per request"},
	{"tls-keepalive", "HTTPS, keep-alive"},
	{"h2load", "HTTP/2 over TLS, h2load"},
}

// restartKinds say what a contender's restart replaces, for the tables, by
// the contender's name or its prefix before a dash: a peer's configuration
// reload is not a binary upgrade.
var restartKinds = map[string]string{
	"naive":      "new binary (stop, start)",
	"reuseport":  "new binary (1 of 4 workers)",
	"tableflip":  "new binary (upgrade)",
	"zd-handoff": "new binary (upgrade)",
	"zd-tickets": "new binary (upgrade)",
	"zd-tls13":   "new binary (upgrade)",
	"zd-drain":   "new binary (1 of 4 workers)",
	"zd-cpu":     "new binary (1 of 4 workers)",
	"zd-steer":   "new binary (1 of 4 workers)",
	"zd-systemd": "new binary (stop, start)",
	"nginx":      "config reload only",
	"haproxy":    "config reload, binary re-executed",
	"caddy":      "config reload only (in-process)",
}

// restartKind looks name up in restartKinds, then the names it extends
// (zd-systemd-pid1, then zd-systemd).
func restartKind(name string) string {
	for n := name; n != ""; {
		if k, ok := restartKinds[n]; ok {
			return k
		}
		i := strings.LastIndexByte(n, '-')
		if i < 0 {
			break
		}
		n = n[:i]
	}
	return "-"
}

// headlineRun is one mode's run: its rows and the lines of its header.
type headlineRun struct {
	title, mode, machine, command, load string
	rows                                []summary
}

// readHeadline reads dir/mode/results.json and the header of
// dir/mode/results.md for every mode of headlineModes present in dir.
func readHeadline(dir string) ([]headlineRun, error) {
	var runs []headlineRun
	for _, m := range headlineModes {
		sub := filepath.Join(dir, m.dir)
		b, err := os.ReadFile(filepath.Join(sub, "results.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		r := headlineRun{title: m.title}
		if err := json.Unmarshal(b, &r.rows); err != nil {
			return nil, fmt.Errorf("%s: %w", sub, err)
		}
		if err := r.readHeader(filepath.Join(sub, "results.md")); err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no results.json under %v", dir, modeDirs())
	}
	return runs, nil
}

func modeDirs() []string {
	var d []string
	for _, m := range headlineModes {
		d = append(d, m.dir)
	}
	return d
}

// readHeader takes the Machine, Command, Load average and Mode lines of a
// results.md.
func (r *headlineRun) readHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "|") {
			break
		}
		for prefix, to := range map[string]*string{"Machine: ": &r.machine, "Command: ": &r.command,
			"Load average: ": &r.load, "Mode: ": &r.mode} {
			if v, ok := strings.CutPrefix(line, prefix); ok {
				*to = v
			}
		}
	}
	return sc.Err()
}

// writeHeadline writes one table per run: every contender, failed requests,
// reconnects per restart, p99 around restarts / steady, restart duration,
// then which peer comes closest.
func writeHeadline(w io.Writer, runs []headlineRun) {
	for _, r := range runs {
		fmt.Fprintf(w, "### %s\n\n", r.title)
		fmt.Fprintln(w, "| contender | restart replaces | c | failed / requests | reconnects per restart | p99 around restarts / steady ms (ratio) | restart ms median (max) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		rows := slices.Clone(r.rows)
		slices.SortStableFunc(rows, func(a, b summary) int { return cmp.Compare(a.Concurrency, b.Concurrency) })
		for _, s := range rows {
			kind := restartKind(s.Contender)
			if s.Skipped != "" {
				fmt.Fprintf(w, "| %s | %s | %d | skipped: %s | | | |\n", s.Contender, kind, s.Concurrency, s.Skipped)
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %.0f (%.0f) |\n", s.Contender, kind, s.Concurrency,
				failedCell(s), reconnects(s, r.mode), p99Cell(s), s.RestartMS, s.RestartMSMax)
		}
		fmt.Fprintf(w, "\n%s\n\n", closest(rows))
		fmt.Fprintf(w, "Command: %s. Load average (1, 5, 15 min): %s. Mode: %s. %s\n\n", r.command,
			cmp.Or(r.load, "not recorded"), r.mode, r.machine)
	}
}

func failedCell(s summary) string {
	f := fmt.Sprintf("%d / %d", s.Failed, s.Requests)
	if len(s.Errors) > 0 {
		f += " (run error: " + strings.Join(s.Errors, "; ") + ")"
	}
	if s.Failed == 0 && len(s.Errors) == 0 {
		f = "**" + f + "**"
	}
	return f
}

// reconnects is the connections opened again per restart: a pool's, or
// (dials - c) / restarts with keep-alive; "-" where every request opens one
// (or h2load's runs, which open theirs anew each restart).
func reconnects(s summary, mode string) string {
	switch {
	case s.Restarts == 0 || s.H2load:
		return "-"
	case s.Pool > 0:
		return fmt.Sprintf("%.2f", s.ReconnectsPerRestart)
	case strings.Contains(mode, "keep-alive"):
		return fmt.Sprintf("%.2f", float64(s.Dials-int64(s.Concurrency*len(s.DialsPerRep)))/float64(s.Restarts))
	}
	return "every request"
}

func p99Cell(s summary) string {
	if s.P99Steady <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f / %.1f (%.2f)", s.P99Restart, s.P99Steady, s.P99Restart/s.P99Steady)
}

// better orders rows by failed requests, then by p99 ratio: the first is the
// better one.
func better(a, b summary) int {
	if c := cmp.Compare(a.Failed, b.Failed); c != 0 {
		return c
	}
	return cmp.Compare(ratio(a), ratio(b))
}

func ratio(s summary) float64 {
	if s.P99Steady <= 0 {
		return 0
	}
	return s.P99Restart / s.P99Steady
}

// closest says, per concurrency, which peer (a contender not zerodrop's)
// comes closest to zerodrop's best, and by how much zerodrop leads.
func closest(rows []summary) string {
	var parts []string
	var concs []int
	for _, s := range rows {
		if !slices.Contains(concs, s.Concurrency) {
			concs = append(concs, s.Concurrency)
		}
	}
	for _, c := range concs {
		var zd, peer *summary
		for i, s := range rows {
			if s.Concurrency != c || s.Skipped != "" || len(s.Errors) > 0 {
				continue
			}
			best := &peer
			if strings.HasPrefix(s.Contender, "zd-") {
				best = &zd
			}
			if *best == nil || better(s, **best) < 0 {
				*best = &rows[i]
			}
		}
		if zd == nil || peer == nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("c=%d: %s (%d failed%s) against %s (%d failed%s): %s",
			c, peer.Contender, peer.Failed, ratioNote(*peer), zd.Contender, zd.Failed, ratioNote(*zd), lead(*zd, *peer)))
	}
	if len(parts) == 0 {
		return "Closest peer: no zerodrop and peer rows to compare."
	}
	return "Closest peer (fewest failed, then lowest p99 ratio), against zerodrop's best: " + strings.Join(parts, "; ") + "."
}

// ratioNote is ", p99 ratio R", or "" where s measured no latency (h2load).
func ratioNote(s summary) string {
	if s.P99Steady <= 0 {
		return ""
	}
	return fmt.Sprintf(", p99 ratio %.2f", ratio(s))
}

// lead says by how much zd leads peer, or that it does not.
func lead(zd, peer summary) string {
	switch d := peer.Failed - zd.Failed; {
	case d > 0:
		return fmt.Sprintf("zerodrop leads by %d failed requests", d)
	case d < 0:
		return fmt.Sprintf("the peer leads by %d failed requests", -d)
	}
	switch d := ratio(peer) - ratio(zd); {
	case d > 0.005:
		return fmt.Sprintf("equal on failures, zerodrop leads by %.2f in p99 ratio", d)
	case d < -0.005:
		return fmt.Sprintf("equal on failures, the peer leads by %.2f in p99 ratio", -d)
	}
	return "a tie"
}

// The markers around the generated tables in BENCHMARKS.md.
const (
	headlineBegin = "<!-- headline: generated"
	headlineEnd   = "<!-- headline: end -->"
)

// spliceHeadline returns doc with the lines between its headlineBegin line
// and its headlineEnd line replaced by tables.
func spliceHeadline(doc, tables string) (string, error) {
	i := strings.Index(doc, headlineBegin)
	if i < 0 {
		return "", fmt.Errorf("no line starting %q", headlineBegin)
	}
	nl := strings.IndexByte(doc[i:], '\n')
	j := strings.Index(doc[i:], headlineEnd)
	if nl < 0 || j < nl {
		return "", fmt.Errorf("no %q after %q", headlineEnd, headlineBegin)
	}
	begin, end := i+nl+1, i+j
	return doc[:begin] + "\n" + strings.TrimSpace(tables) + "\n\n" + doc[end:], nil
}

// headlineInto writes the headline tables of dir's results into the file
// path, between its markers.
func headlineInto(dir, path string) error {
	runs, err := readHeadline(dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	writeHeadline(&b, runs)
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := spliceHeadline(string(doc), b.String())
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}

// resummarize writes dir's results.md and results.json again from the
// per-run JSON in dir/runs, for a run stopped before its end (a bounded
// run that ran out of time writes no summary). The header says so.
func resummarize(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "runs", "*.json"))
	if err != nil {
		return err
	}
	var runs []runResult
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r runResult
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return fmt.Errorf("%s: no runs/*.json", dir)
	}
	slices.SortStableFunc(runs, func(a, b runResult) int {
		if c := cmp.Compare(a.Spec.Concurrency, b.Spec.Concurrency); c != 0 {
			return c
		}
		return cmp.Compare(specIndex(a.Spec.Contender), specIndex(b.Spec.Contender))
	})
	header := fmt.Sprintf("Summarized from %d per-run files of %s (by -resummarize: a run stopped before its end, or runs of more than one invocation).\n\nCommand: %s\n",
		len(runs), dir, specCommand(runs))
	if la := readLoad(dir); la != "" {
		header += "\nLoad average: " + la + "\n"
	}
	return writeSummary(dir, header+"\nMode: "+runs[0].Spec.mode()+"\n", runs)
}

// specCommand is the contenders command line equivalent to runs' specs,
// the contenders that ran named with -only.
func specCommand(runs []runResult) string {
	s := runs[0].Spec
	var concs []string
	var names []string
	for _, r := range runs {
		if c := fmt.Sprint(r.Spec.Concurrency); !slices.Contains(concs, c) {
			concs = append(concs, c)
		}
		if !slices.Contains(names, r.Spec.Contender) {
			names = append(names, r.Spec.Contender)
		}
	}
	cmd := "`contenders"
	for _, f := range []struct {
		flag string
		on   bool
	}{{" -keepalive", s.KeepAlive && s.Pool == 0}, {" -tls", s.TLS && !s.HTTP2}, {" -h2", s.HTTP2 && !s.H2load},
		{" -h2load", s.H2load}, {" -post", s.Post}} {
		if f.on {
			cmd += f.flag
		}
	}
	if s.Pool > 0 {
		cmd += fmt.Sprintf(" -pool %d", s.Pool)
	} else {
		cmd += " -c " + strings.Join(concs, ",")
	}
	return cmd + fmt.Sprintf(" -restarts %d -reps 1 -only %s` (equivalent; %d runs done)", s.Restarts, strings.Join(names, ","), len(runs))
}

// readLoad returns the load averages run.sh recorded in dir (loadavg-start,
// loadavg-end), or "".
func readLoad(dir string) string {
	var parts []string
	for _, f := range []string{"start", "end"} {
		if b, err := os.ReadFile(filepath.Join(dir, "loadavg-"+f)); err == nil {
			parts = append(parts, strings.TrimSpace(string(b))+" at the "+f)
		}
	}
	return strings.Join(parts, ", ")
}

// specIndex is the place of the contender name in specs(), or -1.
func specIndex(name string) int {
	return slices.IndexFunc(specs(), func(s spec) bool { return s.name == name })
}
