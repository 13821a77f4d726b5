package handoff_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
)

// BenchmarkTransitWait measures the wait a request sees while its
// keep-alive connection is in transit from one generation to the next:
// detached from the stopping drain.Server's net/http, passed over the unix
// socket of a Pool (ConnSender, ConnListener), validated, and served again
// by the next generation's drain.Server (ServeConn). c clients each hold one
// keep-alive connection and send a request after a random pause of up to
// 50 ms (a sparse pool). Each iteration is one handoff of every connection:
// a new generation joins the pool, the current one shuts down handing its
// connections to it. Each answer names its generation: "moved" is the first
// request of a connection answered by a newer generation than the one
// before (the request that crossed the handoff, and waited if it was sent
// while its connection was in transit), "around" every request sent while
// Shutdown ran, "steady" the others. The metrics are their latency
// percentiles (ms), the ratio of the around and steady p99s, and the mean
// Shutdown duration. batch is drain.Server.HandOverBatch (1024: every
// connection in one batch, as before it existed). A failed request, or a
// connection dialled again, fails the benchmark.
//
//	go test -run '^$' -bench BenchmarkTransitWait -benchtime 30x ./handoff/
func BenchmarkTransitWait(b *testing.B) {
	for _, c := range []int{64, 256} {
		for _, batch := range []int{1024, 16} {
			b.Run(fmt.Sprintf("c=%d/batch=%d", c, batch), func(b *testing.B) { benchTransit(b, c, batch) })
		}
	}
}

func benchTransit(b *testing.B, clients, batch int) {
	ln, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	addrs := map[string]net.Addr{"http": ln.Addr()}

	// A generation: its drain.Server, and its place in the pool.
	type gen struct {
		srv  *drain.Server
		pool *handoff.Pool
	}
	n := 0
	join := func() *gen {
		n++
		name := strconv.Itoa(n)
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
		g := &gen{srv: &drain.Server{HTTP: &http.Server{Handler: handler}, IdleGrace: time.Millisecond, HandOverBatch: batch}}
		p, err := handoff.JoinPool(dir, handoff.ConnsConfig{Addrs: addrs}, map[string]func(handoff.PassedConn){
			"http": func(pc handoff.PassedConn) { g.srv.ServeConn(pc.Conn, pc.State) },
		})
		if err != nil {
			b.Fatal(err)
		}
		g.pool = p
		g.srv.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
			return p.PassConns(ctx, "http", passed(conns))
		}
		return g
	}
	stop := func(g *gen) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		t0 := time.Now()
		g.pool.StopListening()
		rep, err := g.srv.Shutdown(ctx)
		took := time.Since(t0)
		g.pool.Close()
		if err != nil {
			b.Fatalf("shutdown: %v", err)
		}
		if rep.HTTP != nil && rep.HTTP.IdleClosed > 0 {
			b.Fatalf("the drain closed %d idle connections instead of handing them over: %+v", rep.HTTP.IdleClosed, *rep.HTTP)
		}
		return took
	}

	cur := join()
	go cur.srv.Serve(ln)
	load := startTransitLoad(b, ln.Addr().String(), clients)
	defer load.stop()
	load.waitRequests(b, 2*clients)

	var shutdowns time.Duration
	b.ResetTimer()
	for range b.N {
		load.waitRequests(b, clients) // steady traffic on cur first
		next := join()
		load.window(true)
		shutdowns += stop(cur)
		load.window(false)
		cur = next
	}
	b.StopTimer()
	load.waitRequests(b, clients)
	fails := load.stop()
	cur.pool.Close()
	cur.srv.HandOver = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cur.srv.Shutdown(ctx)
	if fails != nil {
		b.Fatal(fails)
	}
	moved, around, steady := load.lat[classMoved], load.lat[classAround], load.lat[classSteady]
	if len(moved) == 0 || len(around) == 0 || len(steady) == 0 {
		b.Fatalf("%d moved, %d around and %d steady requests: too few to measure", len(moved), len(around), len(steady))
	}
	around = append(around, moved...) // a moved request is around a handoff too
	for _, l := range [][]time.Duration{moved, around, steady} {
		slices.Sort(l)
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(pct(moved, 50)), "moved-p50-ms")
	b.ReportMetric(ms(pct(moved, 99)), "moved-p99-ms")
	b.ReportMetric(ms(moved[len(moved)-1]), "moved-max-ms")
	b.ReportMetric(ms(pct(around, 99)), "around-p99-ms")
	b.ReportMetric(ms(pct(steady, 99)), "steady-p99-ms")
	b.ReportMetric(float64(pct(around, 99))/float64(pct(steady, 99)), "p99-ratio")
	b.ReportMetric(ms(shutdowns/time.Duration(b.N)), "handoff-ms")
	b.ReportMetric(0, "ns/op")
}

// passed makes the PassedConns of a drain.Server's detached connections.
func passed(conns []drain.Detached) []handoff.PassedConn {
	pcs := make([]handoff.PassedConn, len(conns))
	for i, d := range conns {
		pcs[i] = handoff.PassedConn{Conn: d.Conn, State: d.Unread}
	}
	return pcs
}

// pct is the p-th percentile of sorted.
func pct(sorted []time.Duration, p int) time.Duration {
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// The classes of a request (see BenchmarkTransitWait).
const (
	classSteady = iota
	classAround
	classMoved
)

// transitLoad is c clients, each on one keep-alive connection it never
// dials again, recording each request's latency as transit (sent while the
// window is open) or steady.
type transitLoad struct {
	quit chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	cond   *sync.Cond
	open   bool
	n      int
	lat    map[int][]time.Duration // by class
	failed error
}

func startTransitLoad(b *testing.B, addr string, clients int) *transitLoad {
	l := &transitLoad{quit: make(chan struct{}), lat: map[int][]time.Duration{}}
	l.cond = sync.NewCond(&l.mu)
	for i := range clients {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			l.stop()
			b.Fatal(err)
		}
		l.wg.Add(1)
		go l.loop(c, uint64(i))
	}
	return l
}

func (l *transitLoad) loop(c net.Conn, seed uint64) {
	defer l.wg.Done()
	defer c.Close()
	r := rand.New(rand.NewPCG(seed, 35))
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
	last := ""
	for deadline := time.Now().Add(10 * time.Minute); time.Now().Before(deadline); {
		tm := time.NewTimer(time.Duration(r.IntN(50_000)) * time.Microsecond)
		select {
		case <-l.quit:
			tm.Stop()
			return
		case <-tm.C:
		}
		l.mu.Lock()
		inTransit := l.open
		l.mu.Unlock()
		t0 := time.Now()
		c.SetDeadline(t0.Add(20 * time.Second))
		gen, err := get(c, br, req)
		d := time.Since(t0)
		l.mu.Lock()
		if err != nil {
			if l.failed == nil {
				l.failed = fmt.Errorf("a request failed (the connection would be dialled again): %w", err)
			}
			l.cond.Broadcast()
			l.mu.Unlock()
			return
		}
		class := classSteady
		switch {
		case last != "" && gen != last:
			class = classMoved
		case inTransit || l.open:
			class = classAround
		}
		last = gen
		l.lat[class] = append(l.lat[class], d)
		l.n++
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// get sends req on c and returns the answer: the generation.
func get(c net.Conn, br *bufio.Reader, req []byte) (string, error) {
	if _, err := c.Write(req); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return "", err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && (resp.StatusCode != http.StatusOK || resp.Close) {
		err = fmt.Errorf("status %d, close %v", resp.StatusCode, resp.Close)
	}
	return string(body), err
}

// window opens or closes the transit window.
func (l *transitLoad) window(open bool) {
	l.mu.Lock()
	l.open = open
	l.mu.Unlock()
}

// waitRequests waits until n more requests were answered, for at most 30 s.
func (l *transitLoad) waitRequests(b *testing.B, n int) {
	tm := time.AfterFunc(30*time.Second, func() {
		l.mu.Lock()
		if l.failed == nil {
			l.failed = fmt.Errorf("fewer than %d requests answered in 30 s", n)
		}
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer tm.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for want := l.n + n; l.n < want && l.failed == nil; {
		l.cond.Wait()
	}
	if l.failed != nil {
		b.Fatal(l.failed)
	}
}

// stop ends the clients and returns the first failure.
func (l *transitLoad) stop() error {
	select {
	case <-l.quit:
	default:
		close(l.quit)
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}
