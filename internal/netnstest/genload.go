package netnstest

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// GenerationHeader is the response header FetchGeneration reads: the
// generation of the server process that answered.
const GenerationHeader = "X-Generation"

// FetchGeneration does one GET of url with c and returns the generation in
// its GenerationHeader; a status other than 200 is an error.
func FetchGeneration(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %s", resp.Status)
	}
	return strconv.Atoi(resp.Header.Get(GenerationHeader))
}

// GenLoad is a closed loop of HTTP clients, each opening a new connection per
// request, that counts the answers by generation and the failures by outcome.
type GenLoad struct {
	client *http.Client
	mu     sync.Mutex
	byGen  map[int]int
	failed map[string]int
	quit   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// GenCounts is what a GenLoad counted.
type GenCounts struct {
	ByGen  map[int]int    // answers by generation
	Failed map[string]int // failures by "outcome: error" (see Classify)
}

// StartGenLoad runs n clients against url with c until Stop (which a
// cleanup of tb calls), for at most limit and 1e6 requests each.
func StartGenLoad(tb testing.TB, c *http.Client, url string, n int, limit time.Duration) *GenLoad {
	l := &GenLoad{client: c, byGen: map[int]int{}, failed: map[string]int{}, quit: make(chan struct{})}
	deadline := time.Now().Add(limit)
	for range n {
		l.wg.Add(1)
		go l.loop(url, deadline)
	}
	tb.Cleanup(func() { l.Stop() })
	return l
}

func (l *GenLoad) loop(url string, deadline time.Time) {
	defer l.wg.Done()
	for i := 0; i < 1e6 && time.Now().Before(deadline); i++ {
		select {
		case <-l.quit:
			return
		default:
		}
		gen, err := FetchGeneration(l.client, url)
		l.mu.Lock()
		if err != nil {
			l.failed[Classify(err).String()+": "+err.Error()]++
		} else {
			l.byGen[gen]++
		}
		l.mu.Unlock()
	}
}

// WaitFor waits up to 60 s until generation gen has answered n requests, and
// fails tb if it has not.
func (l *GenLoad) WaitFor(tb testing.TB, gen, n int) {
	tb.Helper()
	WaitCount(tb, fmt.Sprintf("requests generation %d answered", gen), n, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.byGen[gen]
	})
}

// Stop ends the load (safe to call twice), closes the client's idle
// connections and returns the counts.
func (l *GenLoad) Stop() GenCounts {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return GenCounts{ByGen: l.byGen, Failed: l.failed}
}
