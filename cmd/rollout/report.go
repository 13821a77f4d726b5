package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"text/tabwriter"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// summary is the whole run, as --json prints it.
type summary struct {
	Kernel     string    `json:"kernel"`
	Go         string    `json:"go"`
	Settings   settings  `json:"settings"`
	Strategies []outcome `json:"strategies"`
}

type settings struct {
	DurationMS  int64  `json:"duration_ms"` // per strategy
	Concurrency int    `json:"concurrency"`
	Clients     string `json:"clients"` // new, keepalive or pool (--clients)
	TLS         bool   `json:"tls"`
	Workers     int    `json:"workers"`
	Restarts    int    `json:"restarts"`
	TimeoutMS   int64  `json:"timeout_ms"`
}

// outcome is one strategy's run.
type outcome struct {
	Name          string               `json:"name"`
	Workers       int                  `json:"workers"`
	MigrateReq    int                  `json:"tcp_migrate_req"`
	Restarts      int                  `json:"restarts"`    // done
	DurationMS    float64              `json:"duration_ms"` // of the load
	Requests      int64                `json:"requests"`
	Failed        int64                `json:"failed"`
	FailedByClass map[load.Class]int64 `json:"failed_by_class"`
	// QueueLost is the sum of the drain reports' remainders: connections
	// left in a closing listener's queue. Null when the strategy stops its
	// servers without a drain report (close).
	QueueLost    *int               `json:"queue_lost"`
	Drains       drainTotals        `json:"drains"`
	Kernel       reuseport.Counters `json:"kernel"` // counter deltas over the run
	P50MS        float64            `json:"p50_ms"`
	P99MSSteady  float64            `json:"p99_ms_steady"`
	P99MSRestart float64            `json:"p99_ms_restart"`
	Generations  int                `json:"generations_seen"` // distinct X-Generation values answered
	// Dials counts the connections the clients opened; with keep-alive
	// clients (--clients keepalive or pool), Reconnects is Dials less one
	// per client and less the clients' own (ClientOwn: connections a
	// client closed by itself, with no failed read and no Connection:
	// close, as net/http's Transport does when starved of CPU, then
	// dialled again): the connections a restart closed under them (null
	// with a new connection per request).
	Dials      int64  `json:"dials"`
	Reconnects *int64 `json:"reconnects"`
	ClientOwn  int64  `json:"client_own_closes"`
	// ServerClosed counts the connections a server closed under their
	// client (load.Result.ServerClosed).
	ServerClosed int64          `json:"server_closed"`
	Stops        []workerReport `json:"stops"`
	// FirstErrors is the first error the clients saw in each failure class;
	// Marks the requests sent around each restart, and how many failed.
	FirstErrors map[load.Class]string `json:"first_errors,omitempty"`
	Marks       []load.Event          `json:"marks,omitempty"`
	Errors      []string              `json:"errors,omitempty"`
	Skipped     string                `json:"skipped,omitempty"` // why it did not run
	// Metrics are the zerodrop_ samples of one server's /metrics, scraped
	// after the last restart (--metrics), by name with labels.
	Metrics map[string]string `json:"metrics,omitempty"`
}

// drainTotals adds up the drain reports of the restarts.
type drainTotals struct {
	Reports   int `json:"reports"`
	Queued    int `json:"queued_at_stop"`
	Migrated  int `json:"migrated"`
	Accepted  int `json:"accepted"`
	Remainder int `json:"remainder"`
	Forced    int `json:"forced"`
}

func newSummary(cfg config) *summary {
	var u unix.Utsname
	unix.Uname(&u)
	return &summary{
		Kernel: unix.ByteSliceToString(u.Release[:]),
		Go:     runtime.Version(),
		Settings: settings{DurationMS: cfg.Duration.Milliseconds(), Concurrency: cfg.Concurrency, Clients: cfg.Clients, TLS: cfg.TLS,
			Workers: cfg.Workers, Restarts: cfg.Restarts, TimeoutMS: cfg.Timeout.Milliseconds()},
		Strategies: []outcome{},
	}
}

func newOutcome(s *strategy, cfg config) outcome {
	o := outcome{Name: s.name, Workers: cfg.Workers, MigrateReq: s.migrateReq, Stops: []workerReport{},
		FailedByClass: map[load.Class]int64{load.Reset: 0, load.Refused: 0, load.EOF: 0, load.Timeout: 0}}
	if s.single {
		o.Workers = 1
	}
	return o
}

// fill takes the load's result and the servers' stop reports, from
// concurrency clients of the kind clients.
func (o *outcome) fill(res *load.Result, reports []workerReport, clients string, concurrency int) {
	o.Restarts = len(reports)
	o.Stops = append(o.Stops, reports...)
	for _, r := range reports {
		if !r.Drained {
			continue
		}
		d := &o.Drains
		d.Reports++
		d.Queued += r.Queued
		d.Migrated += r.Migrated
		d.Accepted += r.Accepted
		d.Remainder += r.Remainder
		d.Forced += r.Forced
	}
	if o.Drains.Reports > 0 {
		lost := o.Drains.Remainder
		o.QueueLost = &lost
	}
	if res == nil {
		return
	}
	o.Requests, o.Failed, o.DurationMS = res.Requests, res.Failed, res.DurationMS
	for c, n := range res.FailedByClass {
		o.FailedByClass[c] = n
	}
	o.P50MS, o.P99MSSteady, o.P99MSRestart = res.P50MS, res.P99MSSteady, res.P99MSRestart
	o.Generations = len(res.Headers)
	o.Dials, o.ServerClosed = res.Dials, res.ServerClosed
	if clients != clientsNew {
		o.ClientOwn = max(0, res.ClientClosed-res.AskedClose)
		n := max(0, res.Dials-int64(concurrency)-o.ClientOwn)
		o.Reconnects = &n
	}
	o.FirstErrors, o.Marks = res.Errors, res.Marks
}

func writeJSON(w io.Writer, s *summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// writeTable prints the summary for a person: one line per strategy.
func writeTable(w io.Writer, s *summary) error {
	st := s.Settings
	fmt.Fprintf(w, "zerodrop rollout: Linux %s, %s; per strategy %.1fs, %d clients (%s), %d restarts\n\n",
		s.Kernel, s.Go, float64(st.DurationMS)/1000, st.Concurrency, clientsText(st), st.Restarts)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tservers\trestarts\trequests\tfailed\treset\trefused\teof\ttimeout\tqueue lost\treconnects/restart\tkernel RSTs\tp99 steady\tp99 restart\t")
	for _, o := range s.Strategies {
		if o.Skipped != "" || len(o.Errors) > 0 && o.Requests == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", o.Name)
			continue
		}
		fc := o.FailedByClass
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%d\t%.1f ms\t%.1f ms\t\n",
			o.Name, o.Workers, o.Restarts, o.Requests, o.Failed, fc[load.Reset], fc[load.Refused], fc[load.EOF],
			fc[load.Timeout], lost(o.QueueLost), perRestart(o.Reconnects, o.Restarts), o.Kernel.OutRsts, o.P99MSSteady, o.P99MSRestart)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprint(w, tableNotes)
	writeMetrics(w, s)
	for _, o := range s.Strategies {
		if o.Skipped != "" {
			fmt.Fprintf(w, "%s: skipped: %s\n", o.Name, o.Skipped)
		}
		for _, e := range o.Errors {
			fmt.Fprintf(w, "%s: %s\n", o.Name, e)
		}
		if late := o.DurationMS - float64(s.Settings.DurationMS); late > 500 && o.Skipped == "" {
			fmt.Fprintf(w, "%s: the load ran %.1fs, not %.1fs: restarts fell behind (the slowest took %.0f ms on this machine)\n",
				o.Name, o.DurationMS/1000, float64(s.Settings.DurationMS)/1000, slowest(o.Stops))
		}
		if other := o.Failed - sum(o.FailedByClass, load.Reset, load.Refused, load.EOF, load.Timeout); other > 0 {
			fmt.Fprintf(w, "%s: %d failed requests of other classes (see --json)\n", o.Name, other)
		}
	}
	return nil
}

const tableNotes = `
failed: requests without a full reply (reset, refused, eof: connection closed before a reply, timeout).
queue lost: connections left in a stopping listener's accept queue, per the drain reports ('-': no report).
reconnects/restart: with keep-alive clients, connections closed under them (and redialled) per restart, not counting those a client closed by itself ('-': a new connection per request).
kernel RSTs: Tcp.OutRsts while the load ran (any cause); a queue reset with tcp_migrate_req=0 moves no other counter.
p99: over successful requests, in steady 100 ms buckets and in those within 200 ms of a restart.
`

// clientsText says what the clients do.
func clientsText(st settings) string {
	s := map[string]string{clientsNew: "new connection per request", clientsKeepAlive: "keep-alive, back to back",
		clientsPool: "sparse keep-alive pool"}[st.Clients]
	if st.TLS {
		s += ", TLS"
	}
	return s
}

// perRestart is n per restart, or "-" without n.
func perRestart(n *int64, restarts int) string {
	if n == nil {
		return "-"
	}
	if restarts == 0 {
		return fmt.Sprint(*n)
	}
	return fmt.Sprintf("%.1f", float64(*n)/float64(restarts))
}

func lost(n *int) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

func sum(m map[load.Class]int64, cs ...load.Class) int64 {
	var n int64
	for _, c := range cs {
		n += m[c]
	}
	return n
}

func slowest(stops []workerReport) float64 {
	var m float64
	for _, r := range stops {
		m = max(m, r.RollMS)
	}
	return m
}
