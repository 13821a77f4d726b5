package reuseport_test

import (
	"context"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// BenchmarkListenJoin opens and closes a member joining a group of one, in a
// fresh network namespace (root): the UID check against the group's members
// (sock_diag), bind, listen and the read-back of the options.
func BenchmarkListenJoin(b *testing.B) {
	if !netnstest.BenchInNamespace(b, "ZERODROP_REUSEPORT_BENCH_NETNS") {
		return
	}
	ctx := context.Background()
	cfg := &reuseport.Config{Migration: reuseport.MigrationIgnore}
	first, err := cfg.Listen(ctx, "tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer first.Close()
	addr := first.Addr().String()
	b.ReportAllocs()
	for b.Loop() {
		l, err := cfg.Listen(ctx, "tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		l.Close()
	}
}
