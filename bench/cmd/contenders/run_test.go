package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// Each contender, run briefly in a fresh namespace the way the command runs
// it: every restart is done and marked, new generations serve, and every
// worker is gone afterwards (the harness checks fds and goroutines).
func TestRunContenders(t *testing.T) {
	for _, name := range []string{"naive", "reuseport-m1", "tableflip", "nginx-reuseport-4to2", "zd-handoff", "zd-systemd"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each in its own namespace; slow starts (-race) are the bound
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				s := runSpec{Contender: name, Concurrency: 4, Rep: 1, Restarts: 2,
					Period: 300 * time.Millisecond, Lead: 100 * time.Millisecond, Tail: 300 * time.Millisecond,
					Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
				logs, err := os.CreateTemp(t.TempDir(), "workers")
				if err != nil {
					t.Fatal(err)
				}
				defer logs.Close()
				res := runOne(t.Context(), s, logs)
				if res.Skipped != "" {
					// A contender that needs a missing program (nginx): CI
					// installs it, so there the skip would hide a test.
					if os.Getenv(netnstest.EnvRequirePrivileged) == "1" {
						t.Fatalf("%s; %s=1 (CI) requires every contender to run: .ci/run installs what they need", res.Skipped, netnstest.EnvRequirePrivileged)
					}
					t.Skip(res.Skipped)
				}
				if res.Error != "" || res.Load == nil {
					out, _ := os.ReadFile(logs.Name())
					t.Fatalf("run: %s; workers said:\n%s", res.Error, out)
				}
				if res.Restarts != 2 || len(res.Load.Marks) != 2 || len(res.RestartMS) != 2 {
					t.Errorf("%d restarts, %d marks; want 2 and 2", res.Restarts, len(res.Load.Marks))
				}
				if res.Load.Requests == 0 || len(res.Load.Headers) < 2 {
					t.Errorf("%d requests answered by generations %v; want some, from 2 generations or more",
						res.Load.Requests, res.Load.Headers)
				}
			})
		})
	}
}

// A keep-alive pool through restarts: the handoff worker passes its
// connections to its successor, and a rolled zd-drain worker to a sibling
// (handoff.Pool), so no request fails and the server closes no connection
// under a client; naive restarts close them, so the clients reconnect.
// Before the handoff worker set drain.Server.HandOver, it dialled 16 per
// restart too; before the pool workers joined a pool (ZD_BENCH_NO_POOL=1
// still runs them so), zd-drain's rolled worker closed its idle ones.
func TestRunPool(t *testing.T) {
	const clients, restarts = 16, 3
	for _, name := range []string{"zd-handoff", "zd-drain", "naive"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				s := runSpec{Contender: name, Concurrency: clients, Rep: 1, Restarts: restarts,
					Period: 300 * time.Millisecond, Lead: 300 * time.Millisecond, Tail: 300 * time.Millisecond,
					Window: 100 * time.Millisecond, Timeout: 2 * time.Second,
					Pool: clients, PoolMin: 20 * time.Millisecond, PoolMax: 100 * time.Millisecond}
				res, workers := runLogged(t, s)
				l := res.Load
				if res.Restarts != restarts || l.Pool != clients || l.Requests == 0 {
					t.Fatalf("%d restarts, pool %d, %d requests; want %d, %d, some", res.Restarts, l.Pool, l.Requests, restarts, clients)
				}
				t.Logf("%d requests, %d failed %v, %d dials, %d connections closed by the server, %d by the clients (%d responses said Connection: close), counters %+v",
					l.Requests, l.Failed, l.Errors, l.Dials, l.ServerClosed, l.ClientClosed, l.AskedClose, res.Counters)
				// The dials a Transport made after closing a connection
				// on its own (its write goroutine starved of CPU, at
				// load 25: 17 dials, none closed by the server) are the
				// clients'; the rest are reconnections the server caused.
				caused := l.Dials - int64(clients) - (l.ClientClosed - l.AskedClose)
				switch name {
				case "zd-handoff", "zd-drain": // zd-drain's workers pass theirs to a sibling (handoff.Pool)
					if l.Failed != 0 || l.ServerClosed != 0 || l.Dials < clients {
						t.Errorf("%d failed %v, %d dials, %d connections closed by the server; want 0 failed and none closed (no reconnect forced); workers said:\n%s",
							l.Failed, l.Errors, l.Dials, l.ServerClosed, workers())
					}
					// A rolled pool worker that closes its idle connections
					// (IdleGrace: each answered with Connection: close, which
					// the client closes itself) makes its clients dial again:
					// 33 dials for 16 clients without the pool. Before the
					// clients' own closes were told apart, a run beside a
					// CPU hog (load 12-16) failed here with 24 dials.
					if name == "zd-drain" && caused > clients/4 {
						t.Errorf("%d dials for %d clients, %d closed by the clients on their own: the rolled workers' clients reconnected; workers said:\n%s",
							l.Dials, clients, l.ClientClosed-l.AskedClose, workers())
					}
				case "naive":
					// Every restart closes every connection: each client
					// that sends again dials again.
					if l.Dials <= clients || l.ServerClosed == 0 {
						t.Errorf("%d dials, %d closed by the server; want more than %d and some: the restarts close the connections", l.Dials, l.ServerClosed, clients)
					}
				}
			})
		})
	}
}

// runLogged runs s with runOne, the workers' output in a temporary file,
// and fails t with that output if the run failed or measured nothing. It
// returns the result and a function that reads the workers' output.
func runLogged(t *testing.T, s runSpec) (runResult, func() string) {
	t.Helper()
	logs, err := os.CreateTemp(t.TempDir(), "workers")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logs.Close() })
	workers := func() string {
		out, _ := os.ReadFile(logs.Name())
		return string(out)
	}
	res := runOne(t.Context(), s, logs)
	if res.Error != "" || res.Load == nil {
		t.Fatalf("run: %s; workers said:\n%s", res.Error, workers())
	}
	return res, workers
}

// fake is a contender whose restarts take a given time.
type fake struct {
	took     time.Duration
	restarts atomic.Int32
}

func (f *fake) start(context.Context, *runEnv) error { return nil }
func (f *fake) stop(context.Context) error           { return nil }
func (f *fake) restart(_ context.Context, mark func(string)) error {
	mark("restart")
	f.restarts.Add(1)
	time.Sleep(f.took)
	return nil
}

// Every restart is done, each followed by Period (the last by Tail), and
// timed.
func TestSchedule(t *testing.T) {
	s := runSpec{Contender: "fake", Restarts: 3, Period: 100 * time.Millisecond,
		Lead: 50 * time.Millisecond, Tail: 80 * time.Millisecond}
	f := &fake{took: 50 * time.Millisecond}
	var marks atomic.Int32
	start := time.Now()
	took, err := schedule(t.Context(), s, f, func(string) { marks.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	if len(took) != 3 || f.restarts.Load() != 3 || marks.Load() != 3 {
		t.Fatalf("%d timed, %d done, %d marks; want 3", len(took), f.restarts.Load(), marks.Load())
	}
	for _, ms := range took {
		if ms < 50 {
			t.Errorf("a restart timed %v ms; it sleeps 50 ms", ms)
		}
	}
	if d := time.Since(start); d < 480*time.Millisecond {
		t.Errorf("schedule took %v; want at least 50 + 3*50 + 2*100 + 80 ms", d)
	}
}

func TestScheduleCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := runSpec{Contender: "fake", Restarts: 3, Period: time.Hour, Lead: time.Millisecond}
	took, err := schedule(ctx, s, &fake{}, func(string) {})
	if len(took) != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("schedule = %v, %v; want nothing done, context.Canceled", took, err)
	}
}

// The TLS modes, briefly, in fresh namespaces: every worker mode the
// benchmark compares serves HTTPS (HTTP/2 by ALPN) with the run's
// certificate, the load trusts it, and new generations answer across the
// restarts. The load speaks TLS only (HTTP/2 only with HTTP2), so any ok
// reply came over it.
func TestRunTLS(t *testing.T) {
	for _, tc := range []struct {
		mode                  string
		keepAlive, http, post bool
		contenders            []string
	}{
		{"tls", false, false, false, []string{"naive", "tableflip", "zd-drain", "zd-handoff"}},
		{"tls-keepalive", true, false, false, []string{"zd-handoff", "zd-tickets"}},
		{"h2", false, true, false, []string{"naive", "zd-handoff", "zd-drain"}},
		{"h2-post", false, true, true, []string{"zd-drain"}},
	} {
		for _, name := range tc.contenders {
			t.Run(tc.mode+"/"+name, func(t *testing.T) {
				t.Parallel()
				netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
					// 4 restarts: every worker of zd-drain's pool of 4 is
					// rolled, the one holding the HTTP/2 connections too.
					s := runSpec{Contender: name, Concurrency: 8, Rep: 1, Restarts: 4,
						Period: 300 * time.Millisecond, Lead: 200 * time.Millisecond, Tail: 300 * time.Millisecond,
						Window: 100 * time.Millisecond, Timeout: 2 * time.Second,
						TLS: true, KeepAlive: tc.keepAlive, HTTP2: tc.http, Post: tc.post}
					if tc.http {
						s.StreamsPerConn = 4
					}
					res, _ := runLogged(t, s)
					l := res.Load
					t.Logf("%d requests, %d failed %v, %d retried, %d dials", l.Requests, l.Failed, l.FailedByClass, l.Retried, l.Dials)
					if res.Restarts != 4 || l.Requests == 0 || l.Failed == l.Requests || len(l.Headers) < 2 {
						t.Errorf("%d restarts, %d requests, %d failed (%v), answered by generations %v; want 4 restarts, replies from 2 generations or more",
							res.Restarts, l.Requests, l.Failed, l.Errors, l.Headers)
					}
					// HTTP/2: 8 workers, 4 per connection, so a few
					// connections per generation (a GOAWAY makes the
					// Transports dial again), not one per request; plus one
					// dial per request refused while no server listens
					// (naive).
					if tc.keepAlive {
						checkHandshakes(t, name, res, s.Concurrency)
					}
					if dials := l.Dials - l.FailedByClass[load.Refused]; tc.http && dials > 4*int64(len(l.Headers))+4 {
						t.Errorf("%d dials over HTTP/2 (%d refused) for %d generations; want a few each",
							l.Dials, l.FailedByClass[load.Refused], len(l.Headers))
					}
				})
			})
		}
	}
	// A contender without a TLS mode is skipped with its reason, before
	// anything touches the namespace (this test runs runOne in its own).
	t.Run("zd-systemd-pid1-skipped", func(t *testing.T) {
		res := runOne(t.Context(), runSpec{Contender: "zd-systemd-pid1", TLS: true}, os.Stderr)
		if !strings.Contains(res.Skipped, "no TLS mode") {
			t.Errorf("zd-systemd-pid1 with TLS: %+v, want skipped for having no TLS mode", res)
		}
	})
}

// The -h2load mode, briefly: h2load (nghttp2, which never retries) runs
// across each restart of zerodrop's two strategies and of two that end
// their connections with net/http's single GOAWAY (naive and tableflip,
// whose losses are not asserted: a few restarts may lose nothing).
// zerodrop's fail no stream; the figures reach the summary table.
func TestRunH2load(t *testing.T) {
	for _, name := range []string{"zd-handoff", "zd-drain", "naive", "tableflip"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.H2loadPath(t)
				s := runSpec{Contender: name, Concurrency: 16, Rep: 1, Restarts: 4, Period: 100 * time.Millisecond,
					TLS: true, HTTP2: true, H2load: true, StreamsPerConn: 4}
				logs, err := os.CreateTemp(t.TempDir(), "workers")
				if err != nil {
					t.Fatal(err)
				}
				defer logs.Close()
				res := runOne(t.Context(), s, logs)
				if res.Error != "" || res.H2load == nil {
					out, _ := os.ReadFile(logs.Name())
					t.Fatalf("run: %s; workers said:\n%s", res.Error, out)
				}
				h := res.H2load
				t.Logf("%d restarts: h2load %v; %d runs failed a stream", res.Restarts, h.Total, len(h.Failing))
				// Exercised: streams done across the restarts, whatever their
				// outcome (the controls lose some, more on a loaded machine;
				// how many is a speed: 60-75 at load 25, hundreds when quiet).
				if res.Restarts != 4 || len(res.RestartMS) != 4 || h.Connections != 4 || h.Streams != 4 || h.Total.Done < 16 {
					t.Errorf("%d restarts (%d timed), h2load -c %d -m %d, %d streams done; want 4, 4, -c 4 -m 4, 16 or more",
						res.Restarts, len(res.RestartMS), h.Connections, h.Streams, h.Total.Done)
				}
				if strings.HasPrefix(name, "zd-") && (h.Total.Failed != 0 || len(h.Failing) != 0) {
					t.Errorf("%s: h2load %v, failing runs %+v; want no stream failed", name, h.Total, h.Failing)
				}
				var md strings.Builder
				writeMarkdown(&md, summarize([]runResult{res}))
				if row := fmt.Sprintf("| %s | 16 | 4 | %d | %d (%d) |", name, h.Total.Done, h.Total.Failed, h.Total.Failed); !strings.Contains(md.String(), row) {
					t.Errorf("results.md has no h2load row %q:\n%s", row, md.String())
				}
				// The main table: h2load measured no latency of ours, so none is shown (not 0.00).
				main := fmt.Sprintf("| %s | 16 | 4 | ", name)
				classes := "-"
				if h.Total.Failed > 0 {
					classes = fmt.Sprintf("errored %d", h.Total.Errored)
				}
				end := fmt.Sprintf("| %d (%d) | %s | - | - | - |", h.Total.Failed, h.Total.Failed, classes)
				if !slices.ContainsFunc(strings.Split(md.String(), "\n"), func(l string) bool {
					return strings.HasPrefix(l, main) && strings.HasSuffix(l, end)
				}) {
					t.Errorf("results.md has no main row %q...%q:\n%s", main, end, md.String())
				}
			})
		})
	}
}

// checkHandshakes: the workers of a keep-alive TLS run reported a handshake
// per connection dialled, and their CPU time; with no request failed, zd-tickets's clients did a
// full handshake only on their first connection (at most c, one per session
// cache) and resumed every reconnection, and zd-handoff's resumed none.
func checkHandshakes(t *testing.T, name string, res runResult, c int) {
	t.Helper()
	h, l := res.Handshakes, res.Load
	if h == nil {
		t.Fatal("no handshakes reported")
	}
	t.Logf("handshakes: %d full, %d resumed; cpu %+v", h.Full, h.Resumed, res.CPU)
	// The workers' CPU time: both phases sampled (the steady one may
	// round to 0 ticks in its 100 ms), the restarts' from a report of each
	// worker that exited and from /proc.
	if u := res.CPU; res.Restarts > 0 && (u == nil || u.SteadyNS < 0 || u.RestartsNS <= 0 || u.WorkersSeen < res.Restarts) {
		t.Errorf("CPU %+v after %d restarts: want both phases' CPU time, and a report from each worker that exited", u, res.Restarts)
	}
	if l.Failed != 0 {
		return // a failed handshake drops its client's ticket
	}
	if h.Full+h.Resumed != l.Dials {
		t.Errorf("%d full + %d resumed handshakes for %d dials", h.Full, h.Resumed, l.Dials)
	}
	switch {
	case name == "zd-tickets" && (h.Full > int64(c) || h.Resumed == 0):
		t.Errorf("zd-tickets: %d full handshakes (want at most %d), %d resumed (want all reconnections)", h.Full, c, h.Resumed)
	case name == "zd-handoff" && h.Resumed != 0:
		t.Errorf("zd-handoff: %d handshakes resumed across generations without the keys", h.Resumed)
	}
}
