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
