package main

import (
	"os"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The whole path of the command for the zerodrop worker pools: a run child in
// new network, PID and mount namespaces (a bpf filesystem for zd-steer; zd-cpu
// needs its workers' CPUs read across the PID namespace), its
// JSON result, every restart done and served by new generations.
func TestSpawnRun(t *testing.T) {
	netnstest.RequirePrivileged(t)
	for _, name := range []string{"zd-drain", "zd-steer", "zd-cpu"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := runSpec{Contender: name, Concurrency: 4, Rep: 1, Restarts: 2,
				Period: 300 * time.Millisecond, Lead: 100 * time.Millisecond, Tail: 300 * time.Millisecond,
				Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
			res, err := spawnRun(t.Context(), s, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if res.Error != "" || res.Skipped != "" || res.Load == nil {
				t.Fatalf("run: error %q, skipped %q", res.Error, res.Skipped)
			}
			if res.Restarts != 2 || len(res.Load.Marks) != 2 || len(res.Load.Headers) < 5 {
				t.Errorf("%d restarts, %d marks, generations %v; want 2, 2 and 5 or more (4 workers, 2 rolled)",
					res.Restarts, len(res.Load.Marks), res.Load.Headers)
			}
		})
	}
}
