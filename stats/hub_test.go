package stats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
)

func report(method drain.Method, queued, migrated, accepted, remainder int, took time.Duration) *drain.Report {
	return &drain.Report{Method: method, QueuedAtStop: queued, Migrated: migrated, Accepted: accepted, Remainder: remainder, Took: took}
}

func TestZeroHub(t *testing.T) {
	var h Hub
	s := h.Totals()
	if s.Generation != 0 || len(s.Drains) != 0 || len(s.Handoffs) != 0 || s.Events != 0 || s.DroppedEvents != 0 {
		t.Fatalf("zero hub totals %+v", s)
	}
	h.RecordDrain("x", nil)
	if s := h.Totals(); s.Events != 0 {
		t.Fatalf("nil report recorded: %+v", s)
	}
}

func TestRecordDrain(t *testing.T) {
	var h Hub
	h.RecordDrain("http", report(drain.MethodMigrate, 20, 20, 0, 0, 3*time.Millisecond))
	h.RecordDrain("http", report(drain.MethodMigrate, 5, 3, 0, 2, 40*time.Millisecond))
	h.RecordDrain("http", report(drain.MethodAccept, 7, 0, 7, 0, 2*time.Second))
	forced := report(drain.MethodAccept, 0, 0, 0, 0, time.Millisecond)
	forced.HTTP = &drain.HTTPReport{Forced: make([]drain.ForcedConn, 3), IdleClosed: 4, IdleClosedTLS: 1, HandedOver: 5, HandedOverTLS: 3, TLSNotHandedOver: 1, HandOverReturned: 2, Received: 7, Took: 11 * time.Second}
	h.RecordDrain("admin", forced)
	s := h.Totals()
	if len(s.Drains) != 3 {
		t.Fatalf("drains %+v, want 3 rows", s.Drains)
	}
	admin, accept, migrate := s.Drains[0], s.Drains[1], s.Drains[2]
	if admin.Listener != "admin" || admin.Forced != 3 || admin.IdleClosed != 4 || admin.IdleClosedTLS != 1 || admin.HandedOver != 5 || admin.HandedOverTLS != 3 || admin.TLSNotHandedOver != 1 || admin.HandOverReturned != 2 || admin.Received != 7 || admin.Lossy != 1 || admin.Duration.Sum != 11 {
		t.Errorf("admin row %+v", admin)
	}
	if accept.Method != drain.MethodAccept || accept.Drains != 1 || accept.Queued != 7 || accept.Accepted != 7 || accept.Lossy != 0 {
		t.Errorf("accept row %+v", accept)
	}
	if migrate.Drains != 2 || migrate.Queued != 25 || migrate.Migrated != 23 || migrate.Remainder != 2 || migrate.Lossy != 1 {
		t.Errorf("migrate row %+v", migrate)
	}
	// 3 ms and 40 ms: buckets from 5 ms on hold the first, from 50 ms both.
	want := []uint64{0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}
	if h := migrate.Duration; !reflect.DeepEqual(h.Counts, want) || h.Count != 2 {
		t.Errorf("histogram counts %v count %d, want %v, 2", h.Counts, h.Count, want)
	}
}

func TestRecordHandoff(t *testing.T) {
	var h Hub
	h.SetGeneration(1)
	for g := uint64(1); g <= 4; g++ {
		h.RecordHandoff(Handoff{From: g, To: g + 1, Took: 200 * time.Millisecond, Sockets: 2})
	}
	h.RecordHandoff(Handoff{From: 5, Outcome: OutcomeFailure, Reason: "validation"})
	s := h.Totals()
	if s.Generation != 5 || h.Generation() != 5 {
		t.Fatalf("generation %d, want 5", s.Generation)
	}
	if len(s.Handoffs) != 2 || s.Handoffs[0].Outcome != OutcomeFailure || s.Handoffs[1].Outcome != OutcomeSuccess {
		t.Fatalf("handoffs %+v", s.Handoffs)
	}
	if ok := s.Handoffs[1]; ok.Handoffs != 4 || ok.Sockets != 8 || ok.Duration.Count != 4 || ok.Duration.Sum != 0.8 {
		t.Fatalf("success row %+v", ok)
	}
	if s.Events != 6 {
		t.Fatalf("events %d, want 6", s.Events)
	}
}

func TestHandoffOf(t *testing.T) {
	ok := HandoffOf(handoff.Result{From: 3, To: 4, PID: 99, Took: time.Second}, nil, 2*time.Second)
	if ok != (Handoff{From: 3, To: 4, PID: 99, Took: time.Second, Outcome: OutcomeSuccess}) {
		t.Errorf("success: %+v", ok)
	}
	failed := HandoffOf(handoff.Result{}, &handoff.UpgradeError{Generation: 3, Reason: "digest differs"}, time.Second)
	if failed.Outcome != OutcomeFailure || failed.From != 3 || failed.Reason != "digest differs" || failed.Took != time.Second {
		t.Errorf("failure: %+v", failed)
	}
	late := HandoffOf(handoff.Result{}, &handoff.UpgradeError{Generation: 3, Err: context.DeadlineExceeded}, time.Minute)
	if late.Outcome != OutcomeTimeout || late.From != 3 {
		t.Errorf("timeout: %+v", late)
	}
	other := HandoffOf(handoff.Result{}, errors.New("exec: no such file"), 0)
	if other.Outcome != OutcomeFailure || other.Reason != "exec: no such file" {
		t.Errorf("start error: %+v", other)
	}
}

func TestSnapshotJSON(t *testing.T) {
	var h Hub
	h.RecordDrain("http", report(drain.MethodMigrate, 20, 20, 0, 0, time.Millisecond))
	h.RecordHandoff(Handoff{From: 1, To: 2, Took: time.Second})
	s := h.Snapshot()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Generation != 2 || back.Drains[0].Migrated != 20 || back.Handoffs[0].Duration.Count != 1 || !reflect.DeepEqual(back.Kernel, s.Kernel) {
		t.Fatalf("round trip lost data:\n%s", b)
	}
}

func TestSubscribe(t *testing.T) {
	var h Hub
	ctx, cancel := context.WithCancel(context.Background())
	events := h.Subscribe(ctx)
	h.SetGeneration(7)
	h.RecordDrain("http", report(drain.MethodAccept, 1, 0, 1, 0, 0))
	h.RecordHandoff(Handoff{From: 7, To: 8})
	want := []struct {
		kind Kind
		gen  uint64
	}{{KindGeneration, 7}, {KindDrain, 7}, {KindHandoff, 8}}
	for i, w := range want {
		e := <-events
		if e.Seq != uint64(i+1) || e.Kind != w.kind || e.Generation != w.gen || e.Time.IsZero() {
			t.Fatalf("event %d = %+v, want %v", i, e, w)
		}
	}
	cancel()
	select {
	case _, open := <-events:
		if open {
			t.Fatal("event after cancel")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("channel not closed after cancel")
	}
}

// A subscriber that never reads loses what its buffer cannot hold; the
// recorder does not wait and the loss is counted exactly.
func TestSubscribeDrops(t *testing.T) {
	var h Hub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := h.Subscribe(ctx)
	const n = SubscriberBuffer + 36
	for i := range n {
		h.SetGeneration(uint64(i))
	}
	if s := h.Totals(); s.Events != n || s.DroppedEvents != 36 || len(slow) != SubscriberBuffer {
		t.Fatalf("events %d dropped %d buffered %d, want %d, 36, %d", s.Events, s.DroppedEvents, len(slow), n, SubscriberBuffer)
	}
}

// Records, snapshots and subscriptions from many goroutines (run with -race);
// the totals come out exact.
func TestConcurrent(t *testing.T) {
	var h Hub
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := h.Subscribe(ctx)
			for i := range 200 {
				switch i % 3 {
				case 0:
					h.RecordDrain(fmt.Sprint("l", w%2), report(drain.MethodMigrate, 2, 2, 0, 0, time.Millisecond))
				case 1:
					h.RecordHandoff(Handoff{From: 1, To: 2, Sockets: 1})
				default:
					_ = h.Totals()
				}
				select {
				case <-sub:
				default:
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	s := h.Totals()
	var drains, handoffs uint64
	for _, d := range s.Drains {
		drains += d.Drains
	}
	for _, ho := range s.Handoffs {
		handoffs += ho.Handoffs
	}
	if drains != 8*67 || handoffs != 8*67 || s.Events != 8*134 {
		t.Fatalf("drains %d handoffs %d events %d, want %d, %d, %d", drains, handoffs, s.Events, 8*67, 8*67, 8*134)
	}
}

func TestServeHTTP(t *testing.T) {
	var h Hub
	h.RecordHandoff(Handoff{From: 1, To: 2, Took: time.Second, Sockets: 3})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/debug/zerodrop", nil))
	var s Snapshot
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil || w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	if s.Generation != 2 || len(s.Handoffs) != 1 || s.Handoffs[0].Sockets != 3 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestHooks(t *testing.T) {
	var h Hub
	h.DrainHook("http")(report(drain.MethodAccept, 4, 0, 4, 0, time.Millisecond))
	hook := h.HandoffHook()
	hook(handoff.Result{From: 1, To: 2, Took: time.Second}, nil)
	hook(handoff.Result{From: 2, Took: 2 * time.Minute, Sockets: 3}, fmt.Errorf("waiting for ready: %w", os.ErrDeadlineExceeded))
	s := h.Totals()
	if len(s.Drains) != 1 || s.Drains[0].Listener != "http" || s.Drains[0].Accepted != 4 {
		t.Fatalf("drains %+v", s.Drains)
	}
	if len(s.Handoffs) != 2 || s.Handoffs[0].Outcome != OutcomeSuccess || s.Handoffs[1].Outcome != OutcomeTimeout ||
		s.Handoffs[1].Duration.Sum != 120 || s.Handoffs[1].Sockets != 3 || s.Generation != 2 {
		t.Fatalf("handoffs %+v, generation %d", s.Handoffs, s.Generation)
	}
}
