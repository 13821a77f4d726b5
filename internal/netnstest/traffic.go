package netnstest

import (
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Exchange connects to addr (IPv4), sends a byte and reads one back.
func Exchange(addr string) error {
	c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

// Echo serves l until Accept fails: each connection gets its first byte
// back, and is closed. It returns how many connections it accepted, once
// every one is closed.
func Echo(l net.Listener) int {
	var wg sync.WaitGroup
	defer wg.Wait()
	n := 0
	for {
		c, err := l.Accept()
		if err != nil {
			return n
		}
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 1)
			if _, err := io.ReadFull(c, b); err == nil {
				c.Write(b)
			}
		}()
	}
}

// Loop runs do in n goroutines, again and again, until the returned stop is
// called; stop waits for them and returns the outcomes (Classify).
func Loop(n int, do func() error) (stop func() Tally) {
	var (
		mu    sync.Mutex
		tally = Tally{}
		quit  = make(chan struct{})
		wg    sync.WaitGroup
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-quit:
					return
				default:
				}
				o := Classify(do())
				mu.Lock()
				tally[o]++
				mu.Unlock()
			}
		}()
	}
	return func() Tally {
		close(quit)
		wg.Wait()
		return tally
	}
}

// Lost is how many outcomes in t are not Answered.
func (t Tally) Lost() int {
	n := 0
	for o, v := range t {
		if o != Answered {
			n += v
		}
	}
	return n
}

// Acceptor accepts and closes the connections of the listeners it serves,
// and counts them.
type Acceptor struct {
	accepted atomic.Int64
	wg       sync.WaitGroup
}

// Serve accepts on l in a goroutine until Accept fails.
func (a *Acceptor) Serve(l net.Listener) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			c.Close()
		}
	}()
}

// Accepted is how many connections were accepted so far.
func (a *Acceptor) Accepted() int64 { return a.accepted.Load() }

// Wait waits until every Serve has returned (close the listeners first).
func (a *Acceptor) Wait() { a.wg.Wait() }

// Batch connects n clients to addr from 4 goroutines and waits (at most
// 10 s) until a has accepted them all; it returns the time taken.
func (a *Acceptor) Batch(addr string, n int) time.Duration {
	start := time.Now()
	want := a.accepted.Load() + int64(n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if c, err := net.Dial("tcp4", addr); err == nil {
					c.Close()
				}
			}
		}()
	}
	wg.Wait()
	for deadline := time.Now().Add(10 * time.Second); a.accepted.Load() < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
	return time.Since(start)
}

// Interleave runs b.N connections through each of two groups in batches of
// 100 (base.Batch, then other.Batch, each going first every other time), so
// that both see the same machine load, checks that each accepted b.N, and
// reports each one's connections per second (baseName-conns/s,
// otherName-conns/s), their ratio (otherName/baseName) and the median of the
// per-batch ratios, which resists bursts of load from other processes.
func Interleave(b *testing.B, baseName, base string, ba *Acceptor, otherName, other string, oa *Acceptor) {
	const size = 100
	var tb, to time.Duration
	var ratios []float64
	b.ResetTimer()
	for done, i := 0, 0; done < b.N; done, i = done+size, i+1 {
		n := min(size, b.N-done)
		var p, s time.Duration
		if i%2 == 0 {
			p, s = ba.Batch(base, n), oa.Batch(other, n)
		} else {
			s, p = oa.Batch(other, n), ba.Batch(base, n)
		}
		tb, to = tb+p, to+s
		ratios = append(ratios, p.Seconds()/s.Seconds())
	}
	b.StopTimer()
	if ba.Accepted() != int64(b.N) || oa.Accepted() != int64(b.N) {
		b.Fatalf("accepted %d %s and %d %s, want %d each", ba.Accepted(), baseName, oa.Accepted(), otherName, b.N)
	}
	b.ReportMetric(float64(b.N)/tb.Seconds(), baseName+"-conns/s")
	b.ReportMetric(float64(b.N)/to.Seconds(), otherName+"-conns/s")
	b.ReportMetric(tb.Seconds()/to.Seconds(), otherName+"/"+baseName)
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-batch-"+otherName+"/"+baseName)
}
