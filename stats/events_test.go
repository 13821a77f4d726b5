package stats_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// documented is one row of the event table in the README.
type documented struct {
	level    string
	required []string // fields before the first ';' of the fields cell
	optional []string // fields after it
}

var backticked = regexp.MustCompile("`([a-z_.]+)`")

// readEvents parses the table of the README's "Log events" section.
func readEvents(t *testing.T) map[string]documented {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Log events\n")
	if !ok {
		t.Fatal(`README.md has no "## Log events" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]documented{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) != 5 {
			t.Fatalf("README event row with %d cells: %s", len(cells), line)
		}
		name := strings.Trim(cells[0], "|` ")
		req, opt, _ := strings.Cut(cells[4], ";")
		d := documented{level: strings.TrimRight(strings.Fields(cells[1])[0], ";")}
		for _, m := range backticked.FindAllStringSubmatch(req, -1) {
			d.required = append(d.required, m[1])
		}
		for _, m := range backticked.FindAllStringSubmatch(opt, -1) {
			d.optional = append(d.optional, m[1])
		}
		out[name] = d
	}
	if len(out) == 0 {
		t.Fatal("no event table in README.md")
	}
	return out
}

// notTriggered are the documented events this test cannot cause
// (drain.unsure needs a process whose fds we cannot read; handoff.accept_error
// an accept that fails, as in handoff's TestAcceptErrorRetried; handoff.no_answer
// and handoff.redial a silent or hanging-up predecessor, as in handoff's
// TestPredecessorNoAnswer and TestRacingSuccessors; handoff.conns_refused a
// predecessor passing a connection that is not what it declares, as in
// handoff's TestConnsRefused; handoff.sibling_connected a ConnListener, as
// in handoff's TestSiblings; handoff.conns_idle a sibling that says hello and
// sends nothing, as in handoff's TestConnListenerIdleSlots).
var notTriggered = []string{"handoff.conns_refused", "handoff.sibling_connected", "handoff.conns_idle", "drain.unsure", "handoff.accept_error", "handoff.fallback", "handoff.no_answer", "handoff.redial", "handoff.listen.mismatch", "handoff.listen.options", "handoff.listen.systemd"}

// Every step of a drain (listener and HTTP server) and of a handoff (both
// sides, with an unclaimed socket and a refused peer) logs an event of the
// table in the README, at its level, with its fields and no other.
func TestEvents(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		doc := readEvents(t)
		core, logs := observer.New(zapcore.DebugLevel)
		log := zap.New(core)
		runHandoff(t, log)
		runDrains(t, log)
		seen := map[string]bool{}
		var server int
		for _, e := range logs.All() {
			checkEntry(t, doc, e)
			f := e.ContextMap()
			name, _ := f["event"].(string)
			seen[name] = true
			if _, ok := f["in_flight_at_start"]; ok && f["addr"] != "" {
				server++ // drain.Server's drain.begin and drain.done
			}
		}
		if server != 2 {
			t.Errorf("%d drain.Server events with addr and HTTP fields, want 2 (begin, done)", server)
		}
		for _, name := range notTriggered {
			seen[name] = true
		}
		var missing []string
		for name := range doc {
			if !seen[name] {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("documented events never logged: %v", missing)
		}
	})
}

func checkEntry(t *testing.T, doc map[string]documented, e observer.LoggedEntry) {
	t.Helper()
	fields := e.ContextMap()
	name, _ := fields["event"].(string)
	d, ok := doc[name]
	if !ok {
		t.Errorf("%q logged with event %q, not in the README (fields %v)", e.Message, name, fields)
		return
	}
	if lvl := e.Level.String(); lvl != d.level && !(name == "drain.done" && lvl == "warn") {
		t.Errorf("%s logged at %s, documented %s", name, lvl, d.level)
	}
	allowed := map[string]bool{"event": true}
	if strings.HasPrefix(name, "handoff.") {
		allowed["handoff"], allowed["pid"] = true, true
	}
	for _, f := range d.required {
		allowed[f] = true
		if _, ok := fields[f]; !ok {
			t.Errorf("%s without field %s: %v", name, f, fields)
		}
	}
	for _, f := range d.optional {
		allowed[f] = true
	}
	for f := range fields {
		if !allowed[f] {
			t.Errorf("%s has undocumented field %s", name, f)
		}
	}
}

// runHandoff hands "http" and "extra" from a first Upgrader to a second that
// claims only "http", after a peer that speaks garbage was refused.
func runHandoff(t *testing.T, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := t.TempDir() + "/handoff.sock"
	cfg := handoff.Config{Path: path, Logger: log, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}}
	u1, err := handoff.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u1.Close()
	for _, name := range []string{"http", "extra"} {
		l, err := u1.Listen(ctx, name, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
	}
	if err := u1.Ready(); err != nil {
		t.Fatal(err)
	}
	bad, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	bad.Write([]byte("garbage\n"))
	bad.SetReadDeadline(time.Now().Add(10 * time.Second))
	bad.Read(make([]byte, 512)) // the error frame, or EOF: the refusal was logged
	bad.Close()
	u2, err := handoff.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer u2.Close()
	l, err := u2.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan struct{}, 1)
	if err := u2.HandleConns("http", func(pc handoff.PassedConn) { pc.Conn.Close(); got <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := u2.Ready(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-u1.Exit():
	case <-ctx.Done():
		t.Fatal("first generation not told to exit")
	}
	// One connection passed: handoff.conns_passed, conns_received, and
	// conns_end once the first generation is closed.
	client, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if n, err := u1.PassConns(ctx, []handoff.PassedConn{{Listener: "http", Conn: c.(*net.TCPConn)}}); n != 1 || err != nil {
		t.Fatalf("PassConns: %d, %v", n, err)
	}
	<-got
	u1.Close()
	u2.Close() // waits for the end of the connections' conversation
}

// runDrains stops a drain.Listener and shuts a drain.Server down.
func runDrains(t *testing.T, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	a, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := drain.Wrap(a, drain.Options{Logger: log})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	if _, err := dl.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &drain.Server{HTTP: &http.Server{}, Logger: log}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(b) }()
	waitServing(t, "http://"+b.Addr().String()+"/")
	if _, err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("Serve did not return")
	}
}

// waitServing gets url until it answers, at most 10 s.
func waitServing(t *testing.T, url string) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
			c.CloseIdleConnections()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not serving: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
