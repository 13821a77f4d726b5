package promstats

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/zerodrop/zerodrop/stats"
)

// Group names a reuseport group to export: Listener is the label, Addr the
// "ip:port" the group is bound to. Each scrape reads it with stats.ReadGroup
// (a summary of reuseport.InspectMembers).
type Group struct {
	Listener string
	Addr     string
}

// Options configures a Collector. The zero value exports the Hub and the
// kernel counters, and no group.
type Options struct {
	// Groups are read at every scrape (zerodrop_group_*).
	Groups []Group
	// Timeout bounds reading the groups at each scrape; default 1 s.
	Timeout time.Duration
}

// Collector is a prometheus.Collector for a stats.Hub, the kernel counters
// and the configured groups. Safe for concurrent scrapes. It keeps the
// metrics of rows that did not change since the last scrape, so a scrape
// allocates for what changed only (and for reading the kernel).
type Collector struct {
	hub  *stats.Hub
	opts Options

	mu       sync.Mutex
	drains   map[drainKey]cached
	handoffs map[stats.Outcome]cached
	kernel   stats.Kernel
	kernelMs []prometheus.Metric
}

type drainKey struct{ listener, method string }

// cached are the metrics of a row, valid while its count is n.
type cached struct {
	n       uint64
	metrics []prometheus.Metric
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector for h (nil means a Hub of its own that stays
// empty: only the kernel and the groups are exported).
func New(h *stats.Hub, opts Options) *Collector {
	if h == nil {
		h = new(stats.Hub)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	opts.Groups = append([]Group(nil), opts.Groups...)
	return &Collector{hub: h, opts: opts, drains: map[drainKey]cached{}, handoffs: map[stats.Outcome]cached{}}
}

// Describe sends the descriptors of every metric the Collector may export.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect reads a Snapshot, the kernel counters and the groups, and sends
// the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.hub.Snapshot()
	ch <- gauge(descGeneration, float64(s.Generation))
	ch <- counter(descDropped, float64(s.DroppedEvents))
	c.mu.Lock()
	var ms []prometheus.Metric
	for i := range s.Drains {
		ms = append(ms, c.drainMetrics(&s.Drains[i])...)
	}
	for i := range s.Handoffs {
		ms = append(ms, c.handoffMetrics(&s.Handoffs[i])...)
	}
	ms = append(ms, c.kernelMetrics(s.Kernel)...)
	c.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
	if len(c.opts.Groups) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.Timeout)
		defer cancel()
		for _, g := range c.opts.Groups {
			collectGroup(ctx, ch, g)
		}
	}
}

// drainMetrics returns the row's metrics, cached while its drain count
// stays. c.mu is held.
func (c *Collector) drainMetrics(d *stats.DrainStats) []prometheus.Metric {
	l, m := d.Listener, string(d.Method)
	k := drainKey{l, m}
	if e, ok := c.drains[k]; ok && e.n == d.Drains {
		return e.metrics
	}
	ms := []prometheus.Metric{
		counter(descDrains, float64(d.Drains), l, m),
		counter(descDrainsLossy, float64(d.Lossy), l, m),
		counter(descQueued, float64(d.Queued), l, m),
		counter(descConns, float64(d.Migrated), l, m, "migrated"),
		counter(descConns, float64(d.Accepted), l, m, "accepted"),
		counter(descConns, float64(d.LeftQueued), l, m, "left"),
		counter(descConns, float64(d.Remainder), l, m, "remainder"),
		counter(descForced, float64(d.Forced), l, m),
		counter(descKeepAlive, float64(d.HandedOver), l, m, "handed_over"),
		counter(descKeepAlive, float64(d.HandOverReturned), l, m, "returned"),
		counter(descKeepAlive, float64(d.Received), l, m, "received"),
		counter(descKeepAlive, float64(d.IdleClosed), l, m, "idle_closed"),
		counter(descKeepAlive, float64(d.IdleClosedTLS), l, m, "idle_closed_tls"),
		counter(descKeepAlive, float64(d.HandedOverTLS), l, m, "handed_over_tls"),
		counter(descKeepAlive, float64(d.TLSNotHandedOver), l, m, "tls_not_handed_over"),
		histogram(descDrainDuration, d.Duration, l, m),
	}
	c.drains[k] = cached{d.Drains, ms}
	return ms
}

// handoffMetrics is drainMetrics for a handoff outcome.
func (c *Collector) handoffMetrics(h *stats.HandoffStats) []prometheus.Metric {
	if e, ok := c.handoffs[h.Outcome]; ok && e.n == h.Handoffs {
		return e.metrics
	}
	o := string(h.Outcome)
	ms := []prometheus.Metric{
		counter(descHandoffs, float64(h.Handoffs), o),
		counter(descHandoffSockets, float64(h.Sockets), o),
		histogram(descHandoffDuration, h.Duration, o),
	}
	c.handoffs[h.Outcome] = cached{h.Handoffs, ms}
	return ms
}

// kernelMetrics returns the kernel's metrics, cached while its figures stay.
// c.mu is held.
func (c *Collector) kernelMetrics(k stats.Kernel) []prometheus.Metric {
	if c.kernelMs != nil && sameKernel(k, c.kernel) {
		return c.kernelMs
	}
	ms := []prometheus.Metric{}
	if k.MigrateReq != nil {
		v := 0.0
		if *k.MigrateReq {
			v = 1
		}
		ms = append(ms, gauge(descMigrateReq, v))
	}
	if k.Err == "" {
		n := k.Counters
		ms = append(ms,
			counter(descKMigrateOK, float64(n.MigrateReqSuccess)),
			counter(descKMigrateFail, float64(n.MigrateReqFailure)),
			counter(descKOverflows, float64(n.ListenOverflows)),
			counter(descKDrops, float64(n.ListenDrops)),
			counter(descKOutRsts, float64(n.OutRsts)),
			counter(descKEstabResets, float64(n.EstabResets)))
	}
	c.kernel, c.kernelMs = k, ms
	return ms
}

func sameKernel(a, b stats.Kernel) bool {
	return a.Counters == b.Counters && a.Err == b.Err &&
		(a.MigrateReq == nil) == (b.MigrateReq == nil) && (a.MigrateReq == nil || *a.MigrateReq == *b.MigrateReq)
}

func collectGroup(ctx context.Context, ch chan<- prometheus.Metric, g Group) {
	grp, err := stats.ReadGroup(ctx, g.Addr)
	if err != nil {
		ch <- gauge(descGroupUp, 0, g.Listener)
		return
	}
	ch <- gauge(descGroupUp, 1, g.Listener)
	ch <- gauge(descGroupMembers, float64(grp.Members), g.Listener)
	ch <- gauge(descGroupQueue, float64(grp.Queue), g.Listener)
	ch <- gauge(descGroupBacklog, float64(grp.Backlog), g.Listener)
}

func counter(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func histogram(d *prometheus.Desc, h stats.Histogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	return prometheus.MustNewConstHistogram(d, h.Count, h.Sum, buckets, labels...)
}
