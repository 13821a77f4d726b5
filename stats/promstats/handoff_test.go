package promstats_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// generation is one Upgrader with its listener, in this process.
type generation struct {
	u *handoff.Upgrader
	l net.Listener
}

// startGeneration obtains "http" through a new Upgrader on path and calls
// Ready. Handoffs from it are recorded in old.
func startGeneration(ctx context.Context, path string, old *stats.Hub) (*generation, error) {
	u, err := handoff.New(ctx, handoff.Config{Path: path, Listen: reuseport.Config{Migration: reuseport.MigrationIgnore}, OnHandoff: old.HandoffHook()})
	if err != nil {
		return nil, err
	}
	l, err := u.Listen(ctx, "http", "tcp4", "127.0.0.1:0")
	if err == nil {
		err = u.Ready()
	}
	if err != nil {
		if l != nil {
			l.Close()
		}
		u.Close()
		return nil, err
	}
	return &generation{u, l}, nil
}

func (g *generation) close() {
	g.l.Close()
	g.u.Close()
}

// A real chain of handoffs (handoff.Upgrade, each new generation an
// Upgrader in this process) moves the generation gauge and the handoff
// histogram count by exactly N, seen by the trigger (RecordUpgrade) and by
// the processes handing over (handoff.Config.OnHandoff), which also count
// the sockets.
func TestUpgradeChain(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		const n = 5
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		path := t.TempDir() + "/handoff.sock"
		hub, old := new(stats.Hub), new(stats.Hub)
		c := promstats.New(hub, promstats.Options{})
		cur, err := startGeneration(ctx, path, old)
		if err != nil {
			t.Fatal(err)
		}
		hub.RecordUpgrader(cur.u)
		for i := range n {
			next := make(chan *generation, 1)
			begin := time.Now()
			res, err := handoff.Upgrade(ctx, path, func() error {
				go func() {
					g, err := startGeneration(ctx, path, old)
					if err != nil {
						t.Errorf("generation %d: %v", i+2, err)
					}
					next <- g
				}()
				return nil
			})
			hub.RecordUpgrade(res, err, time.Since(begin))
			var g *generation
			select {
			case g = <-next:
			case <-time.After(time.Minute):
				t.Fatalf("generation %d did not start", i+2)
			}
			if err != nil || g == nil {
				if g != nil {
					g.close()
				}
				t.Fatalf("handoff %d: %v", i+1, err)
			}
			select {
			case <-cur.u.Exit():
			case <-ctx.Done():
				t.Fatal("predecessor not told to exit")
			}
			cur.close()
			cur = g
		}
		defer cur.close()
		compare(t, c, fmt.Sprintf(`
# HELP zerodrop_generation Newest generation known to serve: this process, or its successor after a handoff (1 for the first, +1 per handoff).
# TYPE zerodrop_generation gauge
zerodrop_generation %d
# HELP zerodrop_handoffs_total Handoffs by outcome.
# TYPE zerodrop_handoffs_total counter
zerodrop_handoffs_total{outcome="success"} %d
`, n+1, n), "zerodrop_generation", "zerodrop_handoffs_total")
		for _, c := range []*promstats.Collector{c, promstats.New(old, promstats.Options{})} {
			if count, series := sampleCount(t, c, "zerodrop_handoff_duration_seconds"); count != n || series != 1 {
				t.Fatalf("handoff histogram: %d samples in %d series, want %d, 1", count, series, n)
			}
		}
		compare(t, promstats.New(old, promstats.Options{}), fmt.Sprintf(`
# HELP zerodrop_generation Newest generation known to serve: this process, or its successor after a handoff (1 for the first, +1 per handoff).
# TYPE zerodrop_generation gauge
zerodrop_generation %[1]d
# HELP zerodrop_handoffs_total Handoffs by outcome.
# TYPE zerodrop_handoffs_total counter
zerodrop_handoffs_total{outcome="success"} %[2]d
# HELP zerodrop_handoff_sockets_total Sockets handed over.
# TYPE zerodrop_handoff_sockets_total counter
zerodrop_handoff_sockets_total{outcome="success"} %[2]d
`, n+1, n), "zerodrop_generation", "zerodrop_handoffs_total", "zerodrop_handoff_sockets_total")
	})
}
