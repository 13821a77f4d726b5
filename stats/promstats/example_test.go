package promstats_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// The shortest way to /metrics: the Handler on the program's mux (here
// scraped once through httptest).
func ExampleHandler() {
	hub := new(stats.Hub)
	hub.SetGeneration(1)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promstats.Handler(hub, promstats.Options{}))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "zerodrop_generation") {
			fmt.Println(line)
		}
	}
	// Output: zerodrop_generation 1
}

// A server exposes /metrics: its drains, its generation, the kernel counters
// and its reuseport group, read at each scrape. Here one scrape before the
// drain and the drain's count after it.
func ExampleNew() {
	ctx := context.Background()
	l, err := reuseport.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	hub := new(stats.Hub)
	reg := prometheus.NewRegistry()
	reg.MustRegister(promstats.New(hub, promstats.Options{
		Groups: []promstats.Group{{Listener: "http", Addr: l.Addr().String()}},
	}))

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &drain.Server{HTTP: &http.Server{Handler: mux}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	res, err := client.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "zerodrop_group_up") || strings.HasPrefix(line, "zerodrop_group_members") {
			fmt.Println(line)
		}
	}

	// ... on SIGTERM:
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rep, err := srv.Shutdown(sctx)
	if err != nil {
		log.Fatal(err)
	}
	<-served
	hub.RecordDrain("http", rep)
	mfs, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "zerodrop_drains_total" {
			fmt.Println(mf.GetName(), len(mf.GetMetric()), "series,", mf.GetMetric()[0].GetCounter().GetValue(), "drain")
		}
	}
	// Output:
	// zerodrop_group_members{listener="http"} 1
	// zerodrop_group_up{listener="http"} 1
	// zerodrop_drains_total 1 series, 1 drain
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
