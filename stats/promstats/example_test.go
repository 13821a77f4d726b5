package promstats_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// The shortest way to /metrics.
func ExampleHandler() {
	hub := new(stats.Hub)
	http.Handle("/metrics", promstats.Handler(hub, promstats.Options{}))
}

// A server exposes /metrics: its drains, its generation, the kernel counters
// and its reuseport group. (Compile-only: it listens.)
func ExampleNew() {
	ctx := context.Background()
	hub := new(stats.Hub)
	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.New(hub, promstats.Options{
		Groups: []promstats.Group{{Listener: "http", Addr: "127.0.0.1:8080"}},
	}))

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &drain.Server{HTTP: &http.Server{Addr: "127.0.0.1:8080", Handler: mux}}
	// ... srv.Serve(listener) in a goroutine; on SIGTERM:
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, _ := srv.Shutdown(sctx)
	hub.RecordDrain("http", rep)
}

// The generation and the drains a hub recorded, as Prometheus reads them.
func ExampleNew_gather() {
	hub := new(stats.Hub)
	hub.SetGeneration(3)
	hub.RecordDrain("http", &drain.Report{Method: drain.MethodRelease, QueuedAtStop: 2, LeftQueued: 2})
	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.New(hub, promstats.Options{}))
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "zerodrop_generation", "zerodrop_drains_total":
			for _, m := range mf.GetMetric() {
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				fmt.Println(mf.GetName(), labels, v)
			}
		}
	}
	// Output:
	// zerodrop_drains_total [listener=http method=release] 1
	// zerodrop_generation [] 3
}
