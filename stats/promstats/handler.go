package promstats

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zerodrop/zerodrop/stats"
)

// Handler returns a /metrics handler with a registry of its own holding a
// Collector for h. Programs that already have a registry register New(h,
// opts) in it instead.
func Handler(h *stats.Hub, opts Options) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(h, opts))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}
