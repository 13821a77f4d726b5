package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
)

// envMetrics set to "1" makes the workers serve /metrics (--metrics).
const envMetrics = "ZERODROP_ROLLOUT_METRICS"

// withMetrics adds /metrics (package stats/promstats: the worker's
// generation, its reuseport group and the namespace's kernel counters) to h
// when the runner asked for it; otherwise it returns h, so the figures of a
// run without --metrics are those of the plain handler.
func withMetrics(gen int, h http.Handler) http.Handler {
	if os.Getenv(envMetrics) != "1" {
		return h
	}
	hub := new(stats.Hub)
	hub.SetGeneration(uint64(gen))
	opts := promstats.Options{Groups: []promstats.Group{{Listener: "http", Addr: os.Getenv(envAddr)}}}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promstats.Handler(hub, opts))
	mux.Handle("/", h)
	return mux
}

// scrape GETs url (a new connection: whichever server the group picks) and
// returns its zerodrop_ samples, by name with labels.
func scrape(ctx context.Context, url string, clientTLS *tls.Config) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: clientTLS}}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text format and keeps the samples whose
// name starts with zerodrop_.
func parseMetrics(r io.Reader) (map[string]string, error) {
	m := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "zerodrop_") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			m[line[:i]] = line[i+1:]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	return m, nil
}

// writeMetrics prints each strategy's scraped samples, sorted, under its name.
func writeMetrics(w io.Writer, s *summary) {
	for _, o := range s.Strategies {
		if len(o.Metrics) == 0 {
			continue
		}
		fmt.Fprintf(w, "%s: /metrics of one server after the last restart:\n", o.Name)
		keys := make([]string, 0, len(o.Metrics))
		for k := range o.Metrics {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s %s\n", k, o.Metrics[k])
		}
	}
}
