package drain_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// BenchmarkAccept alternates single Accepts on a plain *net.TCPListener and
// on one wrapped by drain.Wrap (connections queued beforehand, timer stopped),
// so both see the same machine load, and reports each one's median time per
// Accept (robust to preemption on a loaded machine) and the wrapped/plain
// throughput ratio (want >= 0.98). Run as root, it runs in a fresh network
// namespace (see benchInNamespace).
func BenchmarkAccept(b *testing.B) {
	plain, dl := plainAndWrapped(b)
	const batch = 128
	var tp, tw []time.Duration
	b.ResetTimer()
	for i := 0; i*batch < b.N; i++ {
		b.StopTimer()
		cp, cw := dialN(b, plain.Addr().String(), batch), dialN(b, dl.Addr().String(), batch)
		b.StartTimer()
		var ap, aw []net.Conn
		for j := range batch {
			if (i+j)%2 == 0 {
				ap = append(ap, timedAccept(b, plain, &tp))
				aw = append(aw, timedAccept(b, dl, &tw))
			} else {
				aw = append(aw, timedAccept(b, dl, &tw))
				ap = append(ap, timedAccept(b, plain, &tp))
			}
		}
		b.StopTimer()
		for _, cs := range [][]net.Conn{cp, cw, ap, aw} {
			closeAll(cs)
		}
		b.StartTimer()
	}
	mp, mw := median(tp), median(tw)
	b.ReportMetric(float64(mp.Nanoseconds()), "plain-median-ns/accept")
	b.ReportMetric(float64(mw.Nanoseconds()), "wrapped-median-ns/accept")
	b.ReportMetric(float64(mp)/float64(mw), "wrapped/plain-throughput")
}

// plainAndWrapped listens twice on loopback: a plain *net.TCPListener and
// one wrapped by drain.Wrap, both closed at the benchmark's end.
func plainAndWrapped(b *testing.B) (*net.TCPListener, *drain.Listener) {
	plain := listenTCP(b, "127.0.0.1:0")
	b.Cleanup(func() { plain.Close() })
	dl, err := drain.Wrap(listenTCP(b, "127.0.0.1:0"), drain.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dl.Close() })
	return plain, dl
}

func median(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func dialN(b *testing.B, addr string, n int) []net.Conn {
	out := make([]net.Conn, 0, 2*n)
	for range n {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// timedAccept accepts one connection and records the time it took.
func timedAccept(b *testing.B, l net.Listener, times *[]time.Duration) net.Conn {
	t0 := time.Now()
	c, err := l.Accept()
	*times = append(*times, time.Since(t0))
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func closeAll(cs []net.Conn) {
	for _, c := range cs {
		c.(*net.TCPConn).SetLinger(0) // no TIME_WAIT: ports stay free
		c.Close()
	}
}

// BenchmarkDrainIdle drains a server whose last in-flight request finishes
// after the listener has stopped. after-last-request-ms is the time from that
// request's handler returning to Shutdown returning; stop-ms is the listener
// stop (inspection included).
func BenchmarkDrainIdle(b *testing.B) {
	var after, stop time.Duration
	for range b.N {
		a, s := drainOnce(b)
		after += a
		stop += s
	}
	b.ReportMetric(float64(after.Microseconds())/1000/float64(b.N), "after-last-request-ms")
	b.ReportMetric(float64(stop.Microseconds())/1000/float64(b.N), "stop-ms")
}

func drainOnce(b *testing.B) (after, stop time.Duration) {
	tl := listenTCP(b, "127.0.0.1:0")
	dl, err := drain.Wrap(tl, drain.Options{})
	if err != nil {
		b.Fatal(err)
	}
	entered, release, returned := make(chan struct{}), make(chan struct{}), make(chan time.Time, 1)
	ds := &drain.Server{HTTP: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(entered)
		<-release
		w.Write([]byte("ok\n"))
		returned <- time.Now()
	})}}
	served := make(chan error, 1)
	go func() { served <- ds.Serve(dl) }()
	c, err := net.Dial("tcp4", tl.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	c.Write(request("/"))
	<-entered
	res := make(chan *drain.Report, 1)
	go func() {
		rep, err := ds.Shutdown(context.Background())
		if err != nil {
			b.Error(err)
		}
		res <- rep
	}()
	<-dl.Done()
	close(release)
	rep := <-res
	end := time.Now()
	<-served
	return end.Sub(<-returned), rep.HTTP.StopTook
}

// BenchmarkTLSHandshake alternates TLS handshakes (ECDSA P-256, TLS 1.3)
// through tls.NewListener on a plain *net.TCPListener and on one wrapped by
// drain.Wrap and, as ServeTLS does, by the listener that watches handshakes
// (tlsListener), timing each from dial to both ends' handshake done, and
// reports each one's median and the wrapped/plain rate ratio (want >= 0.98).
func BenchmarkTLSHandshake(b *testing.B) {
	cert := netnstest.NewCert(b)
	cfg := &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	plain, dl := plainAndWrapped(b)
	ls := []net.Listener{tls.NewListener(plain, cfg), tls.NewListener(drain.WatchTLS(dl), cfg)}
	times := make([][]time.Duration, 2)
	b.ResetTimer()
	for i := range b.N {
		for k := range 2 {
			k = (k + i) % 2 // alternate which goes first
			times[k] = append(times[k], handshake(b, ls[k], cert.Client()))
		}
	}
	mp, mw := median(times[0]), median(times[1])
	b.ReportMetric(float64(mp.Nanoseconds()), "plain-median-ns/handshake")
	b.ReportMetric(float64(mw.Nanoseconds()), "wrapped-median-ns/handshake")
	b.ReportMetric(float64(mp)/float64(mw), "wrapped/plain-rate")
}

// handshake dials l, completes both ends' handshakes and returns the time.
func handshake(b *testing.B, l net.Listener, cfg *tls.Config) time.Duration {
	t0 := time.Now()
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		errc <- err
	}()
	c, err := tls.Dial("tcp4", l.Addr().String(), cfg)
	if err == nil {
		err = <-errc
		c.Close()
	}
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkHTTP2Requests alternates batches of HTTP/2 requests between a
// plain http.Server and a drain.Server, whose two-step GOAWAY follows every
// frame both ways (goaway.go), so both see the same machine load: over TLS
// (ALPN h2, ServeTLS) and h2c, h2Batch GETs per batch, h2Streams at a time on
// one connection of Go's Transport. It reports each one's median batch time
// and the drain/plain request-rate ratio (want >= 0.98).
func BenchmarkHTTP2Requests(b *testing.B) {
	for _, mode := range []string{"h2", "h2c"} {
		b.Run(mode, func(b *testing.B) {
			var cert *netnstest.Cert
			if mode == "h2" {
				cert = netnstest.NewCert(b)
			}
			plain, drained := startH2(b, cert, false), startH2(b, cert, true)
			var tp, td []time.Duration
			b.ResetTimer()
			for i := range b.N {
				if i%2 == 0 { // alternate which goes first
					tp, td = append(tp, plain.batch(b)), append(td, drained.batch(b))
				} else {
					td, tp = append(td, drained.batch(b)), append(tp, plain.batch(b))
				}
			}
			mp, md := median(tp), median(td)
			b.ReportMetric(float64(mp.Microseconds()), "plain-median-us/batch")
			b.ReportMetric(float64(md.Microseconds()), "drain-median-us/batch")
			b.ReportMetric(float64(mp)/float64(md), "drain/plain-rate")
		})
	}
}

const h2Batch, h2Streams = 256, 16

// h2Target is a server of BenchmarkHTTP2Requests and the client that loads it.
type h2Target struct {
	url    string
	client *http.Client
}

// startH2 serves "ok" over HTTP/2 on loopback, over TLS with cert or h2c
// without, from a drain.Server if drained or a plain http.Server if not; the
// benchmark's cleanup stops it and waits for its Serve to return.
func startH2(b *testing.B, cert *netnstest.Cert, drained bool) *h2Target {
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})}
	tr := &http.Transport{}
	scheme := "https"
	if cert != nil {
		hs.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
		tr.TLSClientConfig, tr.ForceAttemptHTTP2 = cert.Client(), true
	} else {
		scheme = "http"
		hs.Protocols = h2cProtocols()
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	l := listenTCP(b, "127.0.0.1:0")
	var ds *drain.Server
	if drained {
		ds = &drain.Server{HTTP: hs}
	}
	served := make(chan error, 1)
	go func() {
		switch {
		case ds != nil && cert != nil:
			served <- ds.ServeTLS(l, "", "")
		case ds != nil:
			served <- ds.Serve(l)
		case cert != nil:
			served <- hs.ServeTLS(l, "", "")
		default:
			served <- hs.Serve(l)
		}
	}()
	b.Cleanup(func() {
		tr.CloseIdleConnections()
		if ds != nil {
			ds.Shutdown(context.Background())
		} else {
			hs.Close()
		}
		<-served
	})
	return &h2Target{url: scheme + "://" + l.Addr().String() + "/", client: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// batch sends h2Batch GETs, h2Streams at a time, and returns how long they
// took; each must be answered "ok" over HTTP/2.
func (h *h2Target) batch(b *testing.B) time.Duration {
	errc := make(chan error, h2Streams)
	t0 := time.Now()
	for range h2Streams {
		go func() {
			var err error
			for range h2Batch / h2Streams {
				if err = h.get(); err != nil {
					break
				}
			}
			errc <- err
		}()
	}
	var first error
	for range h2Streams {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	took := time.Since(t0)
	if first != nil {
		b.Fatal(first)
	}
	return took
}

func (h *h2Target) get() error {
	resp, err := h.client.Get(h.url)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return err
	case resp.ProtoMajor != 2 || string(body) != "ok\n":
		return fmt.Errorf("%s: %s %q, want HTTP/2 and ok", h.url, resp.Proto, body)
	}
	return nil
}
