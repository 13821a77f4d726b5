package promstats_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// BenchmarkScrape measures Collect alone ("collect": what this package
// costs) and a registry's Gather of the collector ("gather": what a /metrics
// scrape costs, encoding aside), for a Hub with 4 listeners drained by 2
// methods and 2 handoff outcomes. "group" adds
// one group read (a sock_diag dump of a port nobody listens on, so the
// benchmark opens no socket but netlink's).
func BenchmarkScrape(b *testing.B) {
	hub := new(stats.Hub)
	for l := range 4 {
		for _, m := range []drain.Method{drain.MethodMigrate, drain.MethodAccept} {
			hub.RecordDrain(fmt.Sprint("l", l), &drain.Report{Method: m, QueuedAtStop: 3, Accepted: 3, Took: time.Millisecond})
		}
	}
	hub.RecordHandoff(stats.Handoff{From: 1, To: 2, Took: time.Second})
	hub.RecordHandoff(stats.Handoff{From: 2, Outcome: stats.OutcomeFailure})
	for _, bc := range []struct {
		name   string
		groups []promstats.Group
	}{
		{"hub+kernel", nil},
		{"hub+kernel+group", []promstats.Group{{Listener: "http", Addr: "127.0.0.1:1"}}},
	} {
		c := promstats.New(hub, promstats.Options{Groups: bc.groups})
		b.Run(bc.name+"/collect", func(b *testing.B) {
			ch := make(chan prometheus.Metric, 128)
			b.ReportAllocs()
			for b.Loop() {
				c.Collect(ch)
				for len(ch) > 0 {
					<-ch
				}
			}
		})
		b.Run(bc.name+"/gather", func(b *testing.B) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(c)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
