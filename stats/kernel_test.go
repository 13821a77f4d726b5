package stats

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// waitGroupQueue polls ReadGroup until the group's queues hold n, for at most
// 10 s, and returns the last reading.
func waitGroupQueue(t *testing.T, addr string, n uint64) Group {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := ReadGroup(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if g.Queue == n || time.Now().After(deadline) {
			return g
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ReadGroup sees the group the test makes: three members with backlogs 8, 16
// and 32, and the 5 connections queued across them (wherever the hash put
// them); a port nobody listens on is an empty group.
func TestReadGroup(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		ctx := context.Background()
		addr := "127.0.0.1:0"
		for _, backlog := range []int{8, 16, 32} {
			cfg := reuseport.Config{Options: reuseport.Options{Backlog: backlog}, Migration: reuseport.MigrationIgnore}
			l, err := cfg.Listen(ctx, "tcp4", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			addr = l.Addr().String()
		}
		netnstest.Queue(t, addr, 5, netnstest.ClientOptions{})
		g := waitGroupQueue(t, addr, 5)
		want := Group{Addr: addr, Members: 3, Queue: 5, MaxQueue: g.MaxQueue, Backlog: 56, UIDs: 1}
		if g != want || g.MaxQueue < 2 || g.MaxQueue > 5 {
			t.Fatalf("group %+v, want %+v with max queue in [2, 5]", g, want)
		}
		empty, err := ReadGroup(ctx, "127.0.0.1:1")
		if err != nil || empty != (Group{Addr: "127.0.0.1:1"}) {
			t.Fatalf("empty port: %+v, %v", empty, err)
		}
	})
}

func TestReadGroupErrors(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "localhost:80", "127.0.0.1"} {
		_, err := ReadGroup(context.Background(), addr)
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "inspect" {
			t.Errorf("ReadGroup(%q) = %v, want *net.OpError with Op inspect", addr, err)
		}
	}
	_, err := ReadGroup(context.Background(), "127.0.0.1:0")
	if err == nil || !errors.Is(err, reuseport.ErrPortZero) || err.Error() != "inspect tcp 127.0.0.1:0: port 0 names no group" {
		t.Errorf("port 0: %v", err)
	}
}

// The kernel figures of a Snapshot are the namespace's: a lone SO_REUSEPORT
// listener closing with 10 queued and migration on counts
// TCPMigrateReqFailure +10 and resets all 10 (KERNEL.md).
func TestSnapshotKernel(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		var h Hub
		before := h.Snapshot().Kernel
		if before.Err != "" || before.MigrateReq == nil || !*before.MigrateReq {
			t.Fatalf("kernel %+v, want readable counters and migrate_req on", before)
		}
		cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
		l, err := cfg.Listen(context.Background(), "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cs := netnstest.Queue(t, l.Addr().String(), 10, netnstest.ClientOptions{})
		waitGroupQueue(t, l.Addr().String(), 10)
		l.Close()
		tally := cs.Await(10 * time.Second)
		d := h.Snapshot().Kernel.Counters.Sub(before.Counters)
		if tally[netnstest.Reset] != 10 || d.MigrateReqFailure != 10 || d.MigrateReqSuccess != 0 || d.OutRsts != 10 {
			t.Fatalf("tally %v, counter delta %+v; want 10 reset, failure 10, success 0, out_rsts 10", tally, d)
		}
		// The lean parser reads what reuseport.ReadCounters reads.
		want, err := reuseport.ReadCounters()
		if got := h.Snapshot().Kernel.Counters; err != nil || got != want {
			t.Fatalf("snapshot counters %+v, reuseport.ReadCounters %+v, %v", got, want, err)
		}
	})
}

func BenchmarkReadKernel(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if k := ReadKernel(); k.Err != "" {
			b.Fatal(k.Err)
		}
	}
}

// BenchmarkReadGroup reads a group of 4 members, in a fresh network
// namespace with 16 other listeners, as a Prometheus scrape does.
func BenchmarkReadGroup(b *testing.B) {
	if !netnstest.BenchInNamespace(b, "ZERODROP_STATS_BENCH_NETNS") {
		return
	}
	ctx := context.Background()
	addr := "127.0.0.1:0"
	for range 4 {
		cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
		l, err := cfg.Listen(ctx, "tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		addr = l.Addr().String()
	}
	for range 16 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
	}
	b.ReportAllocs()
	for b.Loop() {
		if g, err := ReadGroup(ctx, addr); err != nil || g.Members != 4 {
			b.Fatalf("%+v, %v", g, err)
		}
	}
}
