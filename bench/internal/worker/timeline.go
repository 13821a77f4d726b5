package worker

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// EnvTimeline, when set (in the harness's environment), has every Go worker
// serving TLS log at exit, on stderr, when the TLS handshakes it served began
// (their ClientHello, counted per 10 ms since it was ready) and when it
// answered with Connection: close (per 10 ms since its stop began): where
// the reconnections of a restart land, and how fast. Off in measured runs.
const EnvTimeline = "ZD_BENCH_TIMELINE"

// timelineSpan is how long after ready (handshakes) or the stop (closes)
// the timeline counts, in timelineStep steps.
const (
	timelineSpan = time.Second
	timelineStep = 10 * time.Millisecond
)

// timeline records the instants of a worker's handshakes and
// Connection: close responses.
type timeline struct {
	mu             sync.Mutex
	ready, stop    time.Time
	hellos, closes []time.Time
}

// newTimeline returns a timeline if EnvTimeline is set, else nil.
func newTimeline() *timeline {
	if os.Getenv(EnvTimeline) == "" {
		return nil
	}
	return &timeline{}
}

func (tl *timeline) add(s *[]time.Time) {
	now := time.Now()
	tl.mu.Lock()
	*s = append(*s, now)
	tl.mu.Unlock()
}

func (tl *timeline) mark(at *time.Time) {
	now := time.Now()
	tl.mu.Lock()
	if at.IsZero() {
		*at = now
	}
	tl.mu.Unlock()
}

// tlsConfig returns a TLS config that records each ClientHello.
func (tl *timeline) tlsConfig() *tls.Config {
	return &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		tl.add(&tl.hellos)
		return nil, nil
	}}
}

// handler records the responses h says Connection: close on (the drain sets
// the header before h runs).
func (tl *timeline) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if rw.Header().Get("Connection") == "close" {
			tl.add(&tl.closes)
		}
		h.ServeHTTP(rw, r)
	})
}

// log writes the timeline to stderr.
func (tl *timeline) log(gen string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	fmt.Fprintf(os.Stderr, "timeline %d gen %s: handshakes %d, since ready per %v: %s\n",
		os.Getpid(), gen, len(tl.hellos), timelineStep, histogram(tl.hellos, tl.ready))
	fmt.Fprintf(os.Stderr, "timeline %d gen %s: closes %d, since the stop per %v: %s\n",
		os.Getpid(), gen, len(tl.closes), timelineStep, histogram(tl.closes, tl.stop))
}

// histogram counts the instants in [from, from+timelineSpan) per
// timelineStep, up to the last non-empty step, with those before from first
// ("<N |").
func histogram(ts []time.Time, from time.Time) string {
	if from.IsZero() {
		return "-"
	}
	counts := make([]int, timelineSpan/timelineStep)
	before, last := 0, -1
	for _, t := range ts {
		d := t.Sub(from)
		if d < 0 {
			before++
			continue
		}
		if i := int(d / timelineStep); i < len(counts) {
			counts[i]++
			last = max(last, i)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "<%d |", before)
	for _, n := range counts[:last+1] {
		fmt.Fprintf(&b, " %d", n)
	}
	return b.String()
}
