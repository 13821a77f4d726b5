package promstats_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/stats"
)

// compare checks the exposition of the named metrics against want exactly.
func compare(t *testing.T, c prometheus.Collector, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// sampleCount gathers c and returns the sample count of the histogram name
// (summed over its series) and the number of series.
func sampleCount(t *testing.T, c prometheus.Collector, name string) (count uint64, series int) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				count += m.GetHistogram().GetSampleCount()
				series++
			}
		}
	}
	return count, series
}

// waitGroupQueue polls the group at addr until its queues hold n, at most 10 s.
func waitGroupQueue(t *testing.T, addr string, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, err := stats.ReadGroup(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if g.Queue == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group queue %d, want %d", g.Queue, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// answer accepts on l until Accept fails; each connection's line is read,
// answered with name and closed (after reading, so the close sends no RST).
// The returned func waits for the loop, at most 15 s.
func answer(t *testing.T, l net.Listener, name string) (wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				c.Write([]byte(name + "\n"))
			}
			c.Close()
		}
	}()
	return func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("accept loop %s did not end", name)
		}
	}
}

// answeredBy counts the clients' replies by the name that answered.
func answeredBy(cs *netnstest.Clients) map[string]int {
	out := map[string]int{}
	for _, c := range cs.List {
		out[strings.TrimSpace(string(c.Reply))]++
	}
	return out
}
