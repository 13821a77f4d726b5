package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// load is a bounded client loop: workers that each call a fetch function
// in a loop (by default a GET on a new connection, no keep-alive) and count
// the answers by the key it returns.
type load struct {
	stopc  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	byGen  map[string]int // by fetch's key: by default the first word after "generation" in the body
	failed []error
}

// startLoad runs workers against url until stop, for at most 2 minutes and
// 100000 requests each.
func startLoad(t *testing.T, url string, workers int) *load {
	return startLoadVia(t, url, workers, nil)
}

// startLoadVia is startLoad with each connection dialled by dial (nil: the
// default dialer).
func startLoadVia(t *testing.T, url string, workers int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *load {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: dial}
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return startLoadFunc(t, workers, func() (string, error) { return fetch(c, url) })
}

// startLoadFunc runs workers that each call get until stop, for at most 2
// minutes and 100000 calls each; get returns the key it counts the answer
// by, or an error.
func startLoadFunc(t *testing.T, workers int, get func() (string, error)) *load {
	l := &load{stopc: make(chan struct{}), byGen: map[string]int{}}
	deadline := time.Now().Add(2 * time.Minute)
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				gen, err := get()
				l.mu.Lock()
				if err != nil {
					l.failed = append(l.failed, err)
				} else {
					l.byGen[gen]++
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(func() { l.stop() })
	return l
}

// fetch GETs url and returns the generation in the answer.
func fetch(c *http.Client, url string) (string, error) {
	f, _, err := answer(c, url)
	if err != nil {
		return "", err
	}
	return f[1], nil
}

// answer GETs url and returns the words of the answer, "generation G pid P
// inode I", and the protocol it came over.
func answer(c *http.Client, url string) ([]string, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, resp.Proto, err
	}
	f := strings.Fields(string(b))
	if resp.StatusCode != 200 || len(f) < 6 || f[0] != "generation" {
		return nil, resp.Proto, fmt.Errorf("GET %s: %d %q", url, resp.StatusCode, b)
	}
	return f, resp.Proto, nil
}

// waitFor waits (at most 60 s) until generation gen answered n requests.
func (l *load) waitFor(t *testing.T, gen string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l.mu.Lock()
		got, failed := l.byGen[gen], len(l.failed)
		l.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation %s answered %d requests in 60 s, want %d (%d failed)", gen, got, n, failed)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the loop (safe twice) and returns the counts.
func (l *load) stop() (map[string]int, []error) {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byGen, l.failed
}
