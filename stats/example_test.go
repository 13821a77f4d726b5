package stats_test

import (
	"context"
	"fmt"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/stats"
)

// A program records what its drains and handoffs did, and reads the totals.
func ExampleHub() {
	var hub stats.Hub
	hub.SetGeneration(1)
	// In a program: rep, err := listener.Stop(ctx), or server.Shutdown(ctx).
	rep := &drain.Report{Method: drain.MethodMigrate, QueuedAtStop: 20, Migrated: 20, Took: 3 * time.Millisecond}
	hub.RecordDrain("http", rep)
	// In the trigger: res, err := handoff.Upgrade(ctx, path, start).
	hub.RecordHandoff(stats.Handoff{From: 1, To: 2, Took: 180 * time.Millisecond, Sockets: 2})

	s := hub.Totals() // Snapshot adds the kernel counters
	for _, d := range s.Drains {
		fmt.Printf("%s %s: %d drains, %d queued, %d migrated, %d remainder\n", d.Listener, d.Method, d.Drains, d.Queued, d.Migrated, d.Remainder)
	}
	fmt.Println("generation", s.Generation, "handoffs", s.Handoffs[0].Handoffs, s.Handoffs[0].Outcome)
	// Output:
	// http migrate: 1 drains, 20 queued, 20 migrated, 0 remainder
	// generation 2 handoffs 1 success
}

// Subscribers see every record as it happens, without slowing the recorder.
func ExampleHub_Subscribe() {
	var hub stats.Hub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := hub.Subscribe(ctx)
	hub.RecordHandoff(stats.Handoff{From: 4, To: 5, Took: time.Second})
	e := <-events
	fmt.Println(e.Seq, e.Kind, e.Handoff.From, "->", e.Handoff.To, e.Generation)
	// Output: 1 handoff 4 -> 5 5
}
