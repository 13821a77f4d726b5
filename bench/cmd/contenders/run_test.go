package main

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// Each contender, run briefly in a fresh namespace the way the command runs
// it: every restart is done and marked, new generations serve, and every
// worker is gone afterwards (the harness checks fds and goroutines). The
// restarts are spaced widely: a -race worker took up to 2 s to start on a
// loaded machine.
func TestRunContenders(t *testing.T) {
	for _, name := range []string{"naive", "reuseport-m1", "tableflip", "nginx-reuseport-4to2", "zd-handoff", "zd-systemd"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each in its own namespace; slow starts (-race) are the bound
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				s := runSpec{Contender: name, Concurrency: 4, Rep: 1, Restarts: 2,
					Period: 2 * time.Second, Lead: 100 * time.Millisecond, Tail: 2 * time.Second,
					Window: 100 * time.Millisecond, Timeout: 2 * time.Second}
				logs, err := os.CreateTemp(t.TempDir(), "workers")
				if err != nil {
					t.Fatal(err)
				}
				defer logs.Close()
				res := runOne(t.Context(), s, logs)
				if res.Skipped != "" {
					t.Skip(res.Skipped)
				}
				if res.Error != "" || res.Load == nil {
					out, _ := os.ReadFile(logs.Name())
					t.Fatalf("run: %s; workers said:\n%s", res.Error, out)
				}
				if res.Restarts != 2 || len(res.Load.Marks) != 2 {
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

// Restarts that overrun their slots delay the next ones; none is done after
// the last slot, so the tail stays steady.
func TestScheduleOverrun(t *testing.T) {
	s := runSpec{Contender: "fake", Restarts: 4, Period: 200 * time.Millisecond, Lead: 100 * time.Millisecond}
	f := &fake{took: 500 * time.Millisecond}
	start := time.Now()
	n, err := schedule(t.Context(), start, s, f, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || f.restarts.Load() != 2 {
		t.Errorf("%d restarts (%d done); want 2: the slots end at 900 ms, the second restart at 1100 ms",
			n, f.restarts.Load())
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("schedule took %v", took)
	}
}

func TestScheduleCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	s := runSpec{Contender: "fake", Restarts: 3, Period: time.Hour}
	n, err := schedule(ctx, time.Now(), s, &fake{}, func(string) {})
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("schedule = %d, %v; want 0, context.Canceled", n, err)
	}
}
