package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/reuseport"
)

func fakeRun(name string, c, rep int, failed int64, p99 float64) runResult {
	return runResult{
		Spec:     runSpec{Contender: name, Concurrency: c, Rep: rep},
		Restarts: 10, RestartMS: []float64{float64(rep), 10 * float64(rep), 5},
		Counters: reuseport.Counters{OutRsts: uint64(failed), MigrateReqSuccess: 3},
		Load: &load.Result{Requests: 1000, Failed: failed,
			FailedByClass: map[load.Class]int64{load.Reset: failed},
			P99MSSteady:   p99, P99MSRestart: 2 * p99,
			Marks:   []load.Event{{Name: "restart", AtMS: 500}, {Name: "restart", AtMS: 1000}},
			Buckets: []load.Bucket{{StartMS: 0, Requests: 500, P99MS: p99}, {StartMS: 500, Requests: 500, Failed: failed, P99MS: 2 * p99}},
		},
	}
}

// Rows group runs by contender and concurrency: counts add up, latencies are
// medians over the repetitions, failures are listed per repetition.
func TestSummarize(t *testing.T) {
	runs := []runResult{
		fakeRun("naive", 64, 1, 5, 1), fakeRun("reuseport-m1", 64, 1, 0, 2),
		fakeRun("naive", 64, 2, 7, 3), fakeRun("reuseport-m1", 64, 2, 0, 4),
		fakeRun("naive", 64, 3, 6, 2), fakeRun("reuseport-m1", 64, 3, 0, 9),
		{Spec: runSpec{Contender: "nginx", Concurrency: 64, Rep: 1}, Skipped: "nginx is not installed"},
	}
	rows := summarize(runs)
	if len(rows) != 3 {
		t.Fatalf("%d rows; want 3", len(rows))
	}
	n := rows[0]
	if n.Contender != "naive" || n.Restarts != 30 || n.Requests != 3000 || n.Failed != 18 ||
		n.FailedByClass[load.Reset] != 18 || n.Counters.OutRsts != 18 || n.Counters.MigrateReqSuccess != 9 {
		t.Errorf("naive row: %+v", n)
	}
	if n.P99Steady != 2 || n.P99Restart != 4 || joinInts(n.FailedPerRep) != "5/7/6" {
		t.Errorf("naive p99 %v/%v (want medians 2/4), failed per rep %v", n.P99Steady, n.P99Restart, n.FailedPerRep)
	}
	var md strings.Builder
	writeMarkdown(&md, rows)
	for _, want := range []string{
		"| naive | 64 | 30 | 5 / 30 | 3000 | 18 (5/7/6) | reset 18 | 0.00 / 2.00 / 0.0 | 0.00 / 4.00 / 0.0 | 2.00 |",
		"| reuseport-m1 | 64 | 30 | 5 / 30 | 3000 | 0 (0/0/0) | - |",
		"| nginx | 64 | skipped: nginx is not installed |",
		"| naive | 64 | 9 | 0 | 0 | 0 | 18 | 0 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func TestWriteSummary(t *testing.T) {
	dir := t.TempDir()
	if err := writeSummary(dir, "Machine: test\n", []runResult{fakeRun("naive", 8, 1, 2, 1)}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []summary
	if err := json.Unmarshal(b, &rows); err != nil || len(rows) != 1 || rows[0].Failed != 2 {
		t.Errorf("results.json: %v, %+v", err, rows)
	}
	md, err := os.ReadFile(filepath.Join(dir, "results.md"))
	if err != nil || !strings.HasPrefix(string(md), "Machine: test\n") {
		t.Errorf("results.md: %v, %q", err, md)
	}
}

// The plot is an SVG with the run in its title and a line per restart.
func TestPlotRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.svg")
	if err := plotRun(path, fakeRun("naive", 64, 1, 5, 1)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.HasPrefix(s, "<?xml") || !strings.Contains(s, "<svg") ||
		!strings.Contains(s, "naive, concurrency 64, rep 1: 10 restarts, 1000 requests, 5 failed") {
		t.Errorf("not the SVG expected: %.300s", s)
	}
	if got := strings.Count(s, "stroke:#787878"); got != 4 {
		t.Errorf("%d mark lines; want 4 (2 marks in 2 panels)", got)
	}
}

// The nginx configuration: reuseport only when asked, the generation in
// every reply, and nginx itself accepts it (when installed).
func TestNginxConf(t *testing.T) {
	dir := t.TempDir()
	for _, rp := range []bool{false, true} {
		path := filepath.Join(dir, "nginx.conf")
		c := nginxConf{Dir: dir, Addr: "127.0.0.1:8080", Gen: "7", Workers: 2, Reuseport: rp}
		if err := c.render(path); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		s := string(b)
		if strings.Contains(s, "reuseport") != rp || !strings.Contains(s, "add_header X-Generation 7 always;") ||
			!strings.Contains(s, "worker_processes 2;") {
			t.Errorf("reuseport %v:\n%s", rp, s)
		}
		if _, err := exec.LookPath("nginx"); err != nil {
			continue
		}
		out, err := exec.Command("nginx", "-t", "-p", dir+"/", "-c", path, "-e", filepath.Join(dir, "error.log")).CombinedOutput()
		if err != nil {
			t.Errorf("nginx -t, reuseport %v: %v\n%s", rp, err, out)
		}
	}
}

// Without nginx on PATH, the nginx contenders are skipped with the reason,
// before anything is set up.
func TestNginxMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	res := runOne(t.Context(), runSpec{Contender: "nginx-reuseport", Concurrency: 1}, os.Stderr)
	if res.Skipped != "nginx is not installed (apt-get install nginx-light)" || res.Error != "" || res.Load != nil {
		t.Errorf("runOne = %+v; want skipped", res)
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-c", "8, 16", "-only", "naive,zd-drain", "-restarts", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.concurrency) != 2 || o.concurrency[1] != 16 || len(o.contenders) != 2 || o.base.Restarts != 3 {
		t.Errorf("options %+v", o)
	}
	for _, bad := range [][]string{{"-c", "0"}, {"-only", "nope"}, {"-reps", "0"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// -h2 implies -tls; the header names the mode.
func TestParseTLSFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		tls  bool
		h2   int // StreamsPerConn
		mode string
	}{
		{nil, false, 0, "plain HTTP/1.1, a new connection per request"},
		{[]string{"-tls"}, true, 0, "HTTPS (TLS 1.3, HTTP/1.1), a new connection and a full handshake per request"},
		{[]string{"-tls", "-keepalive"}, true, 0, "HTTPS (TLS 1.3, HTTP/1.1), keep-alive"},
		{[]string{"-h2"}, true, 8, "HTTP/2 over TLS (ALPN h2), net/http's Transport, 8 workers' streams per connection"},
		{[]string{"-h2", "-h2-streams", "16"}, true, 16, "HTTP/2 over TLS (ALPN h2), net/http's Transport, 16 workers' streams per connection"},
		{[]string{"-h2", "-post"}, true, 8, "HTTP/2 over TLS (ALPN h2), net/http's Transport, 8 workers' streams per connection; every request a small POST net/http cannot replay (GetBody nil)"},
		{[]string{"-tls", "-post"}, true, 0, "HTTPS (TLS 1.3, HTTP/1.1), a new connection and a full handshake per request; every request a small POST net/http cannot replay (GetBody nil)"},
	} {
		o, err := parseFlags(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if o.base.TLS != tc.tls || o.base.HTTP2 != (tc.h2 > 0) || o.base.StreamsPerConn != tc.h2 || o.base.mode() != tc.mode {
			t.Errorf("parseFlags(%q): TLS %v HTTP2 %v streams %d mode %q; want %v %v %d %q", tc.args,
				o.base.TLS, o.base.HTTP2, o.base.StreamsPerConn, o.base.mode(), tc.tls, tc.h2 > 0, tc.h2, tc.mode)
		}
	}
	for _, bad := range [][]string{{"-h2", "-pool", "4"}, {"-h2", "-h2-streams", "0"}, {"-post", "-pool", "4"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

func TestParsePoolFlags(t *testing.T) {
	o, err := parseFlags([]string{"-c", "8", "-pool", "32", "-pool-interval", "10ms-20ms"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.concurrency) != 1 || o.concurrency[0] != 32 || o.base.Pool != 32 ||
		o.base.PoolMin != 10*time.Millisecond || o.base.PoolMax != 20*time.Millisecond {
		t.Errorf("options %+v; want one run of 32 clients at 10-20 ms", o)
	}
	if o, err := parseFlags(nil); err != nil || o.base.Pool != 0 || o.base.PoolMin != 0 {
		t.Errorf("no -pool: %+v, %v; want no pool", o.base, err)
	}
	for _, bad := range [][]string{{"-pool", "-1"}, {"-pool", "4", "-rate", "10"},
		{"-pool-interval", "50ms"}, {"-pool-interval", "500ms-50ms"}, {"-pool-interval", "0s-1s"}, {"-pool-interval", "x-1s"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
}

// A pool run's row counts the dials, and the reconnects per restart over
// every repetition; the pool table lists only pool runs.
func TestSummarizePool(t *testing.T) {
	pooled := func(name string, rep int, dials int64) runResult {
		r := fakeRun(name, 16, rep, 1, 1)
		r.Load.Pool, r.Load.Dials = 16, dials
		return r
	}
	rows := summarize([]runResult{pooled("zd-handoff", 1, 16), pooled("naive", 1, 176),
		pooled("zd-handoff", 2, 16), pooled("naive", 2, 186), fakeRun("reuseport-m1", 16, 1, 0, 1)})
	if len(rows) != 3 {
		t.Fatalf("%d rows; want 3", len(rows))
	}
	if h, n := rows[0], rows[1]; h.Dials != 32 || h.ReconnectsPerRestart != 0 || n.Dials != 362 ||
		n.ReconnectsPerRestart != 16.5 || joinInts(n.DialsPerRep) != "176/186" {
		t.Errorf("zd-handoff %d dials, %v per restart; naive %d (%v), %v per restart; want 32, 0; 362 (176/186), 16.5",
			h.Dials, h.ReconnectsPerRestart, n.Dials, n.DialsPerRep, n.ReconnectsPerRestart)
	}
	var md strings.Builder
	writeMarkdown(&md, rows)
	for _, want := range []string{
		"| zd-handoff | 16 | 20 | 2 (1/1) | 32 (16/16) | 0.00 |",
		"| naive | 16 | 20 | 2 (1/1) | 362 (176/186) | 16.50 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "| reuseport-m1 | 0 |") {
		t.Errorf("a run without a pool in the pool table:\n%s", md.String())
	}
	var plain strings.Builder
	writeMarkdown(&plain, rows[2:])
	if strings.Contains(plain.String(), "Keep-alive pool") {
		t.Errorf("a pool table without pool runs:\n%s", plain.String())
	}
}

// An HTTP/2 run's row adds up the requests the Transport retried; the
// HTTP/2 table lists only HTTP/2 runs.
func TestSummarizeHTTP2(t *testing.T) {
	h2 := func(name string, rep int, failed, retried, dials int64) runResult {
		r := fakeRun(name, 64, rep, failed, 1)
		r.Spec.TLS, r.Spec.HTTP2 = true, true
		r.Load.Retried, r.Load.Dials = retried, dials
		return r
	}
	rows := summarize([]runResult{h2("zd-handoff", 1, 0, 12, 808), h2("zd-handoff", 2, 0, 9, 806), fakeRun("naive", 64, 1, 3, 1)})
	var md strings.Builder
	writeMarkdown(&md, rows)
	if want := "| zd-handoff | 64 | 20 | 0 (0/0) | 21 (12/9) | 1614 (808/806) |"; !strings.Contains(md.String(), want) {
		t.Errorf("markdown lacks %q:\n%s", want, md.String())
	}
	if strings.Count(md.String(), "HTTP/2: a request counts once") != 1 || strings.Contains(md.String(), "| naive | 64 | 10 | 3 (3) |") {
		t.Errorf("want one HTTP/2 table, without the plain run:\n%s", md.String())
	}
}

// Without haproxy or caddy on PATH, those contenders are skipped with the
// package to install, before anything is set up.
func TestPeersMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for name, want := range map[string]string{
		"haproxy": "haproxy is not installed (apt-get install haproxy)",
		"caddy":   "caddy is not installed (apt-get install caddy)",
	} {
		res := runOne(t.Context(), runSpec{Contender: name, Concurrency: 1}, os.Stderr)
		if res.Skipped != want || res.Error != "" || res.Load != nil {
			t.Errorf("runOne(%s) = %+v; want skipped: %s", name, res, want)
		}
	}
}

// A TLS run's row adds up the handshakes the workers reported: the share of
// reconnections (handshakes beyond each client's first) that resumed, and
// full handshakes per restart; the table lists only runs that reported.
func TestSummarizeHandshakes(t *testing.T) {
	tlsRun := func(name string, rep int, full, resumed int64) runResult {
		r := fakeRun(name, 16, rep, 0, 1)
		r.Handshakes = &handshakes{Full: full, Resumed: resumed}
		return r
	}
	// zd-tickets reports its CPU, in each repetition: 100 ms for 1,000
	// steady requests (100 µs each), then its 10 restarts using 1 s of
	// CPU for 4,000 requests: 100 ms per restart, 60 beyond the 400 ms
	// those requests cost at the steady rate.
	cpuRun := func(r runResult) runResult {
		r.CPU = &cpuUse{SteadyNS: 100e6, SteadyMS: 1000, SteadyRequests: 1000,
			RestartsNS: 1e9, RestartsMS: 4000, RestartsRequests: 4000, WorkersSeen: 3}
		return r
	}
	rows := summarize([]runResult{tlsRun("zd-handoff", 1, 216, 0), cpuRun(tlsRun("zd-tickets", 1, 16, 200)),
		tlsRun("zd-handoff", 2, 216, 4), cpuRun(tlsRun("zd-tickets", 2, 20, 196)), fakeRun("naive", 16, 1, 0, 1)})
	h, k := rows[0], rows[1]
	if h.ResumedShare != 4.0/404 || h.FullPerRestart != 20 || k.ResumedShare != 396.0/400 || k.FullPerRestart != 0.2 {
		t.Errorf("zd-handoff %v resumed, %v full per restart; zd-tickets %v, %v; want 4/404, 20; 396/400, 0.2",
			h.ResumedShare, h.FullPerRestart, k.ResumedShare, k.FullPerRestart)
	}
	var md strings.Builder
	writeMarkdown(&md, rows)
	for _, want := range []string{
		"| zd-handoff | 16 | 20 | 432 | 4 | 1.0% | 20.0 | - | - | - |",
		"| zd-tickets | 16 | 20 | 36 | 396 | 99.0% | 0.2 | 100.0 | 100.0 | 60.0 |",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "| naive | 16 | 20 | 0 |") {
		t.Errorf("a run without handshakes in the handshake table:\n%s", md.String())
	}
}

// -h3 implies -tls, keeps -h2-streams, and runs the contenders that serve
// HTTP/3 (Caddy's too); without it the HTTP/3-only ones do not run.
func TestParseH3Flags(t *testing.T) {
	o, err := parseFlags([]string{"-h3", "-h2-streams", "4", "-post"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"caddy", "h3-naive", "h3-pass", "zd-h3", "h3-reuseport", "zd-h3-pool"}
	if !o.base.H3 || !o.base.TLS || o.base.HTTP2 || o.base.StreamsPerConn != 4 || !slices.Equal(o.contenders, want) ||
		!strings.HasPrefix(o.base.mode(), "HTTP/3 (QUIC), quic-go's http3.Transport, 4 workers' streams per connection") {
		t.Errorf("-h3: H3 %v TLS %v HTTP2 %v streams %d contenders %v mode %q; want true true false 4 %v",
			o.base.H3, o.base.TLS, o.base.HTTP2, o.base.StreamsPerConn, o.contenders, o.base.mode(), want)
	}
	o, err = parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range o.contenders {
		if sp, _ := findSpec(name); sp.h3Only {
			t.Errorf("without -h3: %s runs", name)
		}
	}
	if !slices.Contains(o.contenders, "caddy") {
		t.Errorf("without -h3: caddy does not run (%v)", o.contenders)
	}
	for _, bad := range [][]string{{"-h3", "-h2"}, {"-h3", "-pool", "4"}, {"-h3", "-rate", "10"}, {"-h3", "-h2-streams", "0"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
	// An HTTP/3-only contender in a run without -h3, and one that serves
	// no HTTP/3 in a -h3 run, are skipped before the namespace is touched.
	for _, s := range []runSpec{{Contender: "zd-h3"}, {Contender: "naive", H3: true, TLS: true}} {
		if res := runOne(t.Context(), s, os.Stderr); res.Skipped == "" {
			t.Errorf("runOne(%s, h3 %v) = %+v; want skipped", s.Contender, s.H3, res)
		}
	}
}

// The HTTP/3 table sums the workers' and clients' reports over the
// repetitions and divides the datagrams forwarded by the restarts.
func TestSummarizeH3(t *testing.T) {
	run := func(rep int, fwd, resets int64) runResult {
		return runResult{Spec: runSpec{Contender: "zd-h3", Concurrency: 16, Rep: rep, H3: true}, Restarts: 10,
			Load: &load.Result{Requests: 100, Failed: resets},
			QUIC: &quicResult{Forwarded: fwd, Told: 20, Finished: 19, Forced: 1, Resets: resets, Retried: 3}}
	}
	rows := summarize([]runResult{run(1, 300, 0), run(2, 500, 2)})
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	s := rows[0]
	if !s.H3 || s.QUIC.Forwarded != 800 || s.ForwardedPerRestart != 40 || s.QUIC.Told != 40 || s.QUIC.Forced != 2 || s.QUIC.Resets != 2 {
		t.Errorf("summary %+v", s)
	}
	var b strings.Builder
	writeMarkdown(&b, rows)
	if !strings.Contains(b.String(), "| zd-h3 | 16 | 20 | 2 (0/2) | 2 | 6 | 800 | 40.0 | 40 / 38 / 2 |") {
		t.Errorf("markdown:\n%s", b.String())
	}
}
