package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The whole path of the command for the zerodrop worker pools: a run child in
// new network, PID and mount namespaces (a bpf filesystem for zd-steer; zd-cpu
// needs its workers' CPUs read across the PID namespace), its
// JSON result, every restart done and served by new generations. And
// zd-systemd-pid1, whose real systemd boots as PID 1 of a box in the run
// child's network namespace and needs the child's own /proc.
func TestSpawnRun(t *testing.T) {
	netnstest.RequirePrivileged(t)
	// Generations that answer: 4 workers and the 2 rolled, or 1 process
	// and its 2 successors.
	for name, gens := range map[string]int{"zd-drain": 5, "zd-steer": 5, "zd-cpu": 5, "zd-systemd-pid1": 3} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := runSpec{Contender: name, Concurrency: 4, Rep: 1, Restarts: 2,
				Period: 300 * time.Millisecond, Lead: 100 * time.Millisecond, Tail: 300 * time.Millisecond,
				Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
			res, err := spawnRun(t.Context(), s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped != "" && os.Getenv(netnstest.EnvRequirePrivileged) != "1" {
				t.Skip(res.Skipped) // no systemd here; CI installs it
			}
			if res.Error != "" || res.Skipped != "" || res.Load == nil {
				t.Fatalf("run: error %q, skipped %q", res.Error, res.Skipped)
			}
			if res.Restarts != 2 || len(res.Load.Marks) != 2 || len(res.Load.Headers) < gens {
				t.Errorf("%d restarts, %d marks, generations %v; want 2, 2 and %d or more",
					res.Restarts, len(res.Load.Marks), res.Load.Headers, gens)
			}
		})
	}
}

// The peers that are other people's servers: nginx, HAProxy and Caddy, each
// in plain HTTP and over TLS, through a few reloads in a run child, every
// reload answered by its new generation (HAProxy's by a new worker PID as
// well). A missing binary skips, and fails under
// ZERODROP_REQUIRE_PRIVILEGED=1 (.ci/run installs them).
func TestSpawnRunPeers(t *testing.T) {
	netnstest.RequirePrivileged(t)
	for _, name := range []string{"nginx", "haproxy", "caddy"} {
		for _, tls := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tls=%v", name, tls), func(t *testing.T) {
				t.Parallel()
				s := runSpec{Contender: name, Concurrency: 4, Rep: 1, Restarts: 3, TLS: tls, KeepAlive: tls,
					Period: 300 * time.Millisecond, Lead: 100 * time.Millisecond, Tail: time.Second,
					Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
				res, err := spawnRun(t.Context(), s, os.Stderr)
				if err != nil {
					t.Fatal(err)
				}
				if res.Skipped != "" && os.Getenv(netnstest.EnvRequirePrivileged) != "1" {
					t.Skip(res.Skipped)
				}
				if res.Error != "" || res.Skipped != "" || res.Load == nil {
					t.Fatalf("run: error %q, skipped %q", res.Error, res.Skipped)
				}
				// Each reload was answered by its generation (the
				// contender checks it from outside, or the run fails);
				// the load saw at least one reload's, however loaded
				// the machine.
				if res.Restarts != 3 || len(res.Load.Marks) != 3 || len(res.Load.Headers) < 2 {
					t.Errorf("%d restarts, %d marks, generations %v; want 3, 3 and 2 or more",
						res.Restarts, len(res.Load.Marks), res.Load.Headers)
				}
				if res.Load.Requests == 0 {
					t.Error("no request answered")
				}
			})
		}
	}
}

// zd-tls13 through the whole path of the command, over TLS. With keep-alive
// clients (GETs) each restart hands every idle TLS 1.3 connection to the
// successor with its session, so no request fails, no client dials again,
// the workers served exactly one full handshake per client (its first) and
// none after, and the successors answered on the connections they
// inherited. zd-tickets, the control, closes them: its clients dial again
// and resume. In the sparse pool every request is a POST with a body, and
// its connections are handed over too: the pool's clients never dial
// again (before tlsresume followed request bodies, every one of them was
// drained and its client reconnected). Before the worker set
// drain.Server.TLSHandOver (ZD_BENCH_TLS_HANDOVER), zd-tls13 did not exist.
func TestSpawnRunTLS13(t *testing.T) {
	netnstest.RequirePrivileged(t)
	const clients, restarts = 8, 3
	for _, tc := range []struct {
		mode, name string
		pool       int
	}{
		{"keepalive", "zd-tls13", 0}, {"pool", "zd-tls13", clients}, {"keepalive", "zd-tickets", 0},
	} {
		t.Run(tc.mode+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			s := runSpec{Contender: tc.name, Concurrency: clients, Rep: 1, Restarts: restarts, TLS: true, KeepAlive: true,
				Period: 300 * time.Millisecond, Lead: 200 * time.Millisecond, Tail: 300 * time.Millisecond,
				Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
			if tc.pool > 0 {
				s.KeepAlive, s.Pool, s.PoolMin, s.PoolMax = false, tc.pool, 20*time.Millisecond, 100*time.Millisecond
			}
			res, err := spawnRun(t.Context(), s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if res.Error != "" || res.Skipped != "" || res.Load == nil || res.Handshakes == nil {
				t.Fatalf("run: error %q, skipped %q, load %v, handshakes %v", res.Error, res.Skipped, res.Load, res.Handshakes)
			}
			l, h := res.Load, res.Handshakes
			t.Logf("%d requests, %d failed %v, %d dials, %d closed by the server, generations %v; handshakes %d full, %d resumed",
				l.Requests, l.Failed, l.Errors, l.Dials, l.ServerClosed, l.Headers, h.Full, h.Resumed)
			if res.Restarts != restarts || l.Requests == 0 || l.Failed != 0 || len(l.Headers) < 2 {
				t.Fatalf("%d restarts, %d requests, %d failed %v, answered by generations %v; want %d, some, none failed, the successors too",
					res.Restarts, l.Requests, l.Failed, l.Errors, l.Headers, restarts)
			}
			switch {
			// The pool's clients dial at their first request, when
			// another's ticket may be in the shared session cache
			// already: at most one full handshake each.
			// A dial after a connection the client closed on its own
			// (its Transport starved of CPU: 11 dials for 8 clients
			// beside the CPU hog at load 20, none closed by the server)
			// is the client's; none may follow the server's close or
			// its Connection: close.
			case tc.name == "zd-tls13" && tc.pool > 0:
				own := l.ClientClosed - l.AskedClose
				if l.ServerClosed != 0 || l.AskedClose != 0 || l.Dials > clients+own || h.Full+h.Resumed != l.Dials || h.Full > clients {
					t.Errorf("%d dials (%d after the client's own closes), %d closed by the server, %d asked to close, %d full and %d resumed handshakes; want %d dials and those the clients made on their own, one handshake each",
						l.Dials, own, l.ServerClosed, l.AskedClose, h.Full, h.Resumed, clients)
				}
			case tc.name == "zd-tls13":
				// Dials, not ServerClosed: a closed-loop client's read
				// cut by the load's end counts there too (zd-tickets
				// shows as many).
				if l.Dials != clients || h.Full != clients || h.Resumed != 0 {
					t.Errorf("%d dials, %d full and %d resumed handshakes; want %d dials, %d full, none resumed",
						l.Dials, h.Full, h.Resumed, clients, clients)
				}
			case l.Dials <= clients || h.Full+h.Resumed != l.Dials || h.Full > clients || h.Resumed < l.Dials-clients:
				t.Errorf("%d dials, %d full and %d resumed handshakes; want reconnections, each resumed (at most %d full)",
					l.Dials, h.Full, h.Resumed, clients)
			}
		})
	}
}

// The -h3 mode: each HTTP/3 contender through 3 restarts in a run child,
// loaded by quic-go's http3.Transport with non-idempotent POSTs. zd-h3 must
// lose no request, see no stateless reset, forward datagrams to its
// predecessors and tell connections to go away; the socket-passing control
// (16 connections, where the others have 4) must show the loss it exists
// for (a request failed or a connection reset), or the benchmark could not
// see it. The same for the pools of 4 workers on
// the port rolled one at a time: zd-h3-pool (quicdrain slots) loses
// nothing, h3-reuseport (quic-go workers, the reuseport group changed at
// each roll) loses. h3-naive and Caddy (reloaded with caddy
// reload) must serve through their restarts; a missing caddy skips, and
// fails under ZERODROP_REQUIRE_PRIVILEGED=1.
func TestSpawnRunH3(t *testing.T) {
	netnstest.RequirePrivileged(t)
	for _, name := range []string{"zd-h3", "h3-pass", "h3-naive", "caddy", "zd-h3-pool", "h3-reuseport"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := runSpec{Contender: name, Concurrency: 16, StreamsPerConn: 4, Rep: 1, Restarts: 3, H3: true, TLS: true, Post: true,
				Period: 500 * time.Millisecond, Lead: 500 * time.Millisecond, Tail: time.Second,
				Window: 100 * time.Millisecond, Timeout: 10 * time.Second}
			if name == "h3-pass" || name == "h3-reuseport" {
				// A control loses the connections whose datagrams reach
				// a process that does not know them; with 4 connections
				// a roll can miss them all (h3-reuseport lost none once
				// beside the CPU hog, the whole suite running: about
				// half of a group's connections keep their socket when a
				// worker joins). 16 connections make the loss certain.
				s.Concurrency = 64
			}
			res, err := spawnRun(t.Context(), s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if res.Skipped != "" && os.Getenv(netnstest.EnvRequirePrivileged) != "1" {
				t.Skip(res.Skipped)
			}
			if res.Error != "" || res.Skipped != "" || res.Load == nil || res.QUIC == nil {
				t.Fatalf("run: error %q, skipped %q", res.Error, res.Skipped)
			}
			l, q := res.Load, res.QUIC
			t.Logf("%s", progressLine(res))
			// Caddy's HTTP/3 connections stay with the configuration
			// that accepted them (the contender checks each reload from
			// outside, over TCP): the load may see one generation only.
			if res.Restarts != 3 || len(l.Marks) != 3 || len(l.Headers) < 2 && name != "caddy" || l.Requests-l.Failed == 0 {
				t.Errorf("%d restarts, %d marks, generations %v, %d requests answered; want 3, 3, 2 or more, some",
					res.Restarts, len(l.Marks), l.Headers, l.Requests-l.Failed)
			}
			switch name {
			case "zd-h3", "zd-h3-pool":
				if l.Failed != 0 || q.Resets != 0 || q.Forced != 0 {
					t.Errorf("%d requests failed (%v, first errors %v), %d stateless resets, %d connections forced; want none",
						l.Failed, l.FailedByClass, l.Errors, q.Resets, q.Forced)
				}
				if q.Forwarded == 0 || q.Told == 0 {
					t.Errorf("%d datagrams forwarded, %d connections told to go away: the handover was not exercised", q.Forwarded, q.Told)
				}
			case "h3-pass", "h3-reuseport":
				if l.Failed == 0 && q.Resets == 0 {
					t.Errorf("the socket-passing control lost no request and saw no stateless reset")
				}
			}
		})
	}
}
