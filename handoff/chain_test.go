package handoff

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// A chain of 20 handoffs, each triggered through Upgrade, while workers open a
// new connection per request at full speed: no request fails, every
// generation 1..21 answers in order, each process ends with the fds it began
// with, and the PID file names the newest process.
func TestChainOfHandoffs(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const handoffs = 20
		path := handoffPath(t)
		pidFile := t.TempDir() + "/app.pid"
		old := startApp(t, path, envPID+"="+pidFile)
		f := old.expect(t, "ready")
		if f[1] != "1" {
			t.Fatalf("first generation %s, want 1", f[1])
		}
		addr := f[3]
		ld := startLoad(t, addr, 4)
		ld.waitAnswers(t, 50)
		time.Sleep(time.Second)              // steady state, for the latency comparison
		handoffAt := []time.Time{time.Now()} // [0]: end of the steady state
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for g := uint64(2); g <= handoffs+1; g++ {
			// Start the successor first and let it initialise, so that the
			// latency window measures the handoff, not a Go binary starting.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			next := startAppIn(t, path, r, envPID+"="+pidFile, envWait+"=1")
			r.Close()
			next.expect(t, "started")
			time.Sleep(50 * time.Millisecond)
			handoffAt = append(handoffAt, time.Now())
			res, err := Upgrade(ctx, path, func() error { _, err := w.WriteString("go\n"); return err })
			w.Close()
			if err != nil {
				select {
				case line := <-next.lines:
					t.Logf("generation %d said %q", g, line)
				case <-time.After(time.Second):
				}
				t.Fatalf("handoff to generation %d: %v", g, err)
			}
			if res.From != g-1 || res.To != g || res.PID != next.Cmd.Process.Pid {
				t.Fatalf("Upgrade = %+v, want %d -> %d pid %d", res, g-1, g, next.Cmd.Process.Pid)
			}
			if f := next.expect(t, "ready"); f[1] != strconv.FormatUint(g, 10) || f[3] != addr {
				t.Fatalf("generation %d reports %v", g, f)
			}
			if f := old.expect(t, "exit"); f[1] != f[2] {
				t.Fatalf("generation %d exits with %s fds, started with %s", g-1, f[1], f[2])
			}
			if err := old.Wait(ctx); err != nil {
				t.Fatalf("generation %d: %v", g-1, err)
			}
			if b, _ := os.ReadFile(pidFile); string(b) != strconv.Itoa(res.PID)+"\n" {
				t.Fatalf("pid file %q, want %d", b, res.PID)
			}
			ld.waitAnswers(t, 20)
			// Start the next successor only after this handoff's latency
			// window: a Go binary starting on this 2-core machine is not
			// part of the handoff.
			time.Sleep(time.Until(handoffAt[len(handoffAt)-1].Add(150 * time.Millisecond)))
			old = next
		}
		ld.end()
		ok, errs, maxGen := ld.snapshot()
		t.Logf("%d requests answered, %d failed, over %d handoffs", ok, len(errs), handoffs)
		if len(errs) != 0 {
			t.Fatalf("%d failed requests, first: %v", len(errs), errs[0])
		}
		if maxGen != handoffs+1 {
			t.Fatalf("newest generation seen %d, want %d", maxGen, handoffs+1)
		}
		checkOrder(t, ld.seqs, handoffs+1)
		logLatency(t, ld.lat, handoffAt)
	})
}

// checkOrder: every generation answered, and a worker never hears from a
// generation older than the one before the newest it heard (the old process
// drains while the new one serves, never longer).
func checkOrder(t *testing.T, seqs [][]uint64, last uint64) {
	t.Helper()
	seen := map[uint64]bool{}
	for w, seq := range seqs {
		var top uint64
		for i, g := range seq {
			seen[g] = true
			if g+1 < top {
				t.Fatalf("worker %d request %d answered by generation %d after %d", w, i, g, top)
			}
			top = max(top, g)
		}
	}
	for g := uint64(1); g <= last; g++ {
		if !seen[g] {
			t.Fatalf("generation %d never answered", g)
		}
	}
}

// logLatency reports (never asserts: timing on a shared machine) the client
// p99 of requests started in the 100 ms after each handoff began (at[1:]:
// the successor, already initialised, is told to go) against the steady
// state (the second before at[0]).
func logLatency(t *testing.T, lat []sample, at []time.Time) {
	near := func(s sample) bool {
		for _, h := range at {
			if d := s.at.Sub(h); d >= 0 && d < 100*time.Millisecond {
				return true
			}
		}
		return false
	}
	steadyEnd, at := at[0], at[1:]
	steady, n1 := p99(lat, func(s sample) bool { return s.at.Before(steadyEnd) })
	around, n2 := p99(lat, near)
	// Where in the window the slow requests are: p99 per 10 ms after the
	// handoffs began, over all handoffs.
	var buckets []string
	for b := range 10 {
		p, _ := p99(lat, func(s sample) bool {
			for _, h := range at {
				if d := s.at.Sub(h) - time.Duration(b)*10*time.Millisecond; d >= 0 && d < 10*time.Millisecond {
					return true
				}
			}
			return false
		})
		buckets = append(buckets, p.Round(10*time.Microsecond).String())
	}
	t.Logf("client p99 per 10 ms after a handoff began: %s", strings.Join(buckets, " "))
	t.Logf("client p99: steady state %v (%d requests), within 100 ms of a handoff %v (%d requests), ratio %.2f",
		steady, n1, around, n2, float64(around)/float64(max(steady, 1)))
}
