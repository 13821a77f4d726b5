package quicdrain_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	quicdrain "github.com/zerodrop/zerodrop/quicdrain"
)

// envRounds sets the restarts of TestRestartUnderLoad (default 10).
const envRounds = "ZERODROP_QUIC_ROUNDS"

func reportJSON(r quicdrain.Report) string {
	s := r.Stats
	herr := "ok"
	if r.HandoverError != nil {
		herr = strings.ReplaceAll(r.HandoverError.Error(), " ", "_")
	}
	return fmt.Sprintf("handled=%d read=%d own=%d received=%d forwarded=%d straddled=%d multi=%d dropped=%d handedover=%d handshakes=%d told=%d finished=%d forced=%d took=%s handover=%s drops=%d/%d/%d/%d/%d/%d bad=%d handover_timeouts=%d",
		handled.Load(), s.Read, s.Own, s.Received, s.Forwarded, s.Straddled, s.MultiInitial, s.Dropped(), s.HandedOver, r.Handshakes, r.Told, r.Finished, r.Forced, r.Took.Round(time.Millisecond), herr,
		s.Malformed, s.Unknown, s.DropQueue, s.DropFull, s.DropGone, s.DropOther, s.BadForward, s.HandoverTimeouts)
}

// reportValue reads key=value from a report line.
func reportValue(t *testing.T, line, key string) int64 {
	t.Helper()
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("report %q: %s: %v", line, key, err)
			}
			return n
		}
	}
	t.Fatalf("report %q: no %s", line, key)
	return 0
}

// h3load is the HTTP/3 load: persistent clients (one connection each,
// quic-go's http3.Transport) that POST back to back, and fresh clients
// that open a new connection for each POST.
type h3load struct {
	url   string
	tls   *tls.Config
	stopc chan struct{}
	wg    sync.WaitGroup

	mu                       sync.Mutex
	ok, failed               int
	unsent                   int // see clientRace
	resets, handshake, other int
	byGen                    map[int]int
	firstErr                 error

	watch connWatch // how the client connections ended
}

func startH3Load(t *testing.T, url string, tlsConf *tls.Config, persistent, fresh int) *h3load {
	l := &h3load{url: url, tls: tlsConf, stopc: make(chan struct{}), byGen: map[int]int{}}
	for range persistent {
		l.wg.Add(1)
		go l.client(false)
	}
	for range fresh {
		l.wg.Add(1)
		go l.client(true)
	}
	t.Cleanup(func() { l.stop() })
	return l
}

func (l *h3load) transport() *http3.Transport {
	return &http3.Transport{TLSClientConfig: l.tls, QUICConfig: &quic.Config{MaxIdleTimeout: idleTimeout, HandshakeIdleTimeout: idleTimeout, Tracer: l.watch.tracer}}
}

func (l *h3load) client(fresh bool) {
	defer l.wg.Done()
	tr := l.transport()
	defer func() { tr.Close() }()
	body := bytes.Repeat([]byte("x"), 1000)
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-l.stopc:
			return
		default:
		}
		gen, err := post(tr, l.url, body)
		l.count(gen, err)
		if fresh {
			tr.Close()
			tr = l.transport()
		}
	}
}

// post sends one POST; a failure says which connections it was tried on
// (quic-go's Transport retries a request once, on a new connection, when
// its connection was unusable or the server rejected it).
func post(tr *http3.Transport, url string, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	start := time.Now()
	var tries []string // written by RoundTrip's goroutine only
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		kind := "new"
		if i.Reused {
			kind = "reused"
		}
		tries = append(tries, fmt.Sprintf("%s connection at %v", kind, time.Since(start).Round(time.Millisecond)))
	}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	failed := func(err error) (int, error) {
		return 0, fmt.Errorf("%w (tried on: %s; failed at %v)", err, strings.Join(tries, ", "), time.Since(start).Round(time.Millisecond))
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return failed(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return failed(err)
	}
	f := strings.Fields(string(b))
	if resp.StatusCode != 200 || len(f) != 3 || f[2] != strconv.Itoa(len(body)) {
		return 0, fmt.Errorf("status %d, body %q", resp.StatusCode, b)
	}
	return strconv.Atoi(f[1])
}

func (l *h3load) count(gen int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil {
		l.ok++
		l.byGen[gen]++
		return
	}
	if clientRace(err) {
		l.unsent++
		return
	}
	l.failed++
	if l.firstErr == nil {
		l.firstErr = err
	}
	var reset *quic.StatelessResetError
	var hto *quic.HandshakeTimeoutError
	switch {
	case errors.As(err, &reset):
		l.resets++
	case errors.As(err, &hto), strings.Contains(err.Error(), "handshake"):
		l.handshake++
	default:
		l.other++
	}
}

// clientRace says whether err is quic-go's client closing its own
// connection under the request on a GOAWAY: the request had taken
// a stream but was not yet tracked as in flight when the client's control
// stream goroutine read the GOAWAY, found no request in flight and closed
// the connection with H3_NO_ERROR (quic-go v0.59.1 to v0.65.0, client.go:
// openRequestStream and handleControlStream; see the package doc). No
// server can close that window: the server's GOAWAY comes with a request
// in flight, held GoAwayLead, which makes it rare, not impossible, when
// the client's goroutines are starved of CPU. Such a request was never
// processed (its stream is one the GOAWAY refused); checkHandled proves
// that from the server's side, and the
// tests count these apart (unsent) and print them.
func clientRace(err error) bool {
	var e *http3.Error
	return errors.As(err, &e) && e.ErrorCode == http3.ErrCodeNoError && !e.Remote
}

// checkHandled fails t unless the clients received, from each generation
// that reported, as many answers as the generation handled (its report's
// "handled"): no request a server processed was lost, whatever failed on
// the client's side.
func (l *h3load) checkHandled(t *testing.T, reports []string) {
	t.Helper()
	for i, r := range reports {
		gen := i + 1
		if handled, answered := reportValue(t, r, "handled"), int64(l.answered(gen)); handled != answered {
			t.Errorf("generation %d handled %d requests, its clients received %d answers", gen, handled, answered)
		}
	}
}

// waitGen waits up to 2 minutes until generation gen answered n requests.
func (l *h3load) waitGen(t *testing.T, gen, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		got := l.byGen[gen]
		l.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("generation %d did not answer %d requests within 2 minutes: %s", gen, n, l)
}

func (l *h3load) stop() {
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.wg.Wait()
}

func (l *h3load) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := &l.watch
	return fmt.Sprintf("%d requests answered, %d failed (%d stateless resets, %d handshake failures, %d other; first: %v), "+
		"%d failed by quic-go's client on its own, never processed (see clientRace); "+
		"%d connections opened, %d closed: %d after a GOAWAY, %d by a stateless reset, %d by the server, %d by an idle timeout",
		l.ok, l.failed, l.resets, l.handshake, l.other, l.firstErr, l.unsent,
		w.opened.Load(), w.closed.Load(), w.goaways.Load(), w.resets.Load(), w.byServer.Load(), w.idle.Load())
}

// restarts runs the h3gen helper in mode through n restarts under the
// load, and returns the load and the report lines.
func restarts(t *testing.T, mode string, n, persistent, fresh int) (*h3load, []string) {
	f := newH3Files(t)
	env := append(f.env("h3gen"), envHandoff+"="+filepath.Join(f.dir, "handoff.sock"), envMode+"="+mode)
	s, pid, l := startH3(t, f, env, persistent, fresh)
	var reports []string
	for gen := 1; gen <= n; gen++ {
		next := hup(t, s, pid, gen)
		reports = append(reports, s.Expect(t, fmt.Sprintf("report %d ", gen)))
		if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation %d exited with %v", gen, ws)
		}
		pid = next
		l.waitGen(t, gen+1, 20)
	}
	l.stop()
	return l, reports
}

// h3Addr is where the h3 helpers serve (in the test's namespace).
const h3Addr = "127.0.0.1:4433"

// h3Files are what an h3 helper is given, in a fresh temporary directory
// (dir): a certificate, and the directory of its forwarding sockets (fwd).
type h3Files struct {
	dir, fwd string
	cert     *netnstest.Cert
}

func newH3Files(t *testing.T) h3Files {
	t.Helper()
	f := h3Files{dir: t.TempDir()}
	var err error
	if f.cert, err = netnstest.WriteCert(f.dir, time.Hour); err != nil {
		t.Fatal(err)
	}
	f.fwd = filepath.Join(f.dir, "fwd")
	if err := os.Mkdir(f.fwd, 0o700); err != nil {
		t.Fatal(err)
	}
	return f
}

// env is the environment of the helper ("h3gen" or "h3steer") serving
// h3Addr with these files.
func (f h3Files) env(helper string) []string {
	return []string{"ZERODROP_TEST_HELPER=" + helper, envAddr + "=" + h3Addr, envDir + "=" + f.fwd,
		envCert + "=" + f.cert.CertFile, envKey + "=" + f.cert.KeyFile, "QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING=1"}
}

// startH3 starts generation 1 of the helper of env (a copy of the test
// binary, under a subreaper) and, once it is ready, the HTTP/3 load of
// persistent and fresh clients trusting f's certificate; it returns once
// generation 1 answered 20 requests, with generation 1's pid.
func startH3(t *testing.T, f h3Files, env []string, persistent, fresh int) (*netnstest.Subreaped, int, *h3load) {
	t.Helper()
	s := netnstest.StartSubreaped(t, netnstest.ExecutableCopy(t), env, "-test.run=^$")
	pid := netnstest.Field(t, s.Expect(t, "ready 1 "), 2)
	l := startH3Load(t, "https://"+h3Addr+"/", f.cert.Client(http3.NextProtoH3), persistent, fresh)
	l.waitGen(t, 1, 20)
	return s, pid, l
}

// hup has generation gen (pid) start its successor (SIGHUP), and returns
// the successor's pid once it is ready.
func hup(t *testing.T, s *netnstest.Subreaped, pid, gen int) int {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	return netnstest.Field(t, s.Expect(t, fmt.Sprintf("ready %d ", gen+1)), 2)
}

func rounds(t *testing.T) int {
	v := os.Getenv(envRounds)
	if v == "" {
		return 10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("%s=%q: want 1 to 1000", envRounds, v)
	}
	return n
}

// The HTTP/3 load of the restart tests: persistentConns clients POST back to
// back on one connection each, freshConns open a new connection for each
// POST.
const persistentConns, freshConns = 200, 8

// TestRestartUnderLoad restarts an HTTP/3 server 10 times (or
// ZERODROP_QUIC_ROUNDS) while 200 clients POST (not idempotent: quic-go's
// client retries none that failed) back to back on one connection each and
// 8 open a new connection for each POST: not one request may fail (no
// stateless reset, no handshake failure; those quic-go's client fails
// before sending them, clientRace, are counted apart, and every request a
// generation handled must have reached its client: checkHandled); no
// client connection may end by a
// stateless reset, an idle timeout, or a close by the server (before its
// GOAWAY or after: the server's only close is at the grace); every
// generation must hand over and force no connection; some ClientHellos must
// have taken two Initial datagrams (Go's default X25519MLKEM768 key share).
func TestRestartUnderLoad(t *testing.T) {
	n := rounds(t)
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		start := time.Now()
		l, reports := restarts(t, "zerodrop", n, persistentConns, freshConns)
		t.Logf("%d restarts in %v: %s", n, time.Since(start).Round(time.Millisecond), l)
		t.Logf("UDP in this namespace: %s", udpSNMP())
		var multi, straddled, forwarded, told int64
		for _, r := range reports {
			t.Log(r)
			multi += reportValue(t, r, "multi")
			straddled += reportValue(t, r, "straddled")
			forwarded += reportValue(t, r, "forwarded")
			told += reportValue(t, r, "told")
			if !strings.Contains(r, "handover=ok") || !strings.Contains(r, "forced=0") || !strings.Contains(r, "handover_timeouts=0") {
				t.Errorf("report %q: want handover=ok, forced=0, handover_timeouts=0", r)
			}
		}
		t.Logf("connections whose Initials took more than one datagram: %d; Initials forwarded by the table: %d; datagrams forwarded: %d; connections told to go away: %d",
			multi, straddled, forwarded, told)
		w := &l.watch
		if l.failed != 0 || w.resets.Load() != 0 || w.byServer.Load() != 0 || w.idle.Load() != 0 {
			t.Errorf("%s", l)
		}
		l.checkHandled(t, reports)
		if multi == 0 {
			t.Errorf("no connection sent its ClientHello in more than one Initial datagram")
		}
		if told < int64(n) || w.goaways.Load() == 0 {
			t.Errorf("%d connections told to go away, %d closed by their client after a GOAWAY: the drain was not exercised", told, w.goaways.Load())
		}
	})
}

// TestNaiveRestartLoses is the control: the successor runs quic-go on the
// inherited socket (what users do today, with the fixed stateless reset key
// quic-go recommends), and the predecessor shuts its HTTP/3 server down
// gracefully. Requests must fail and clients must see stateless resets,
// or the test could not see the loss TestRestartUnderLoad exists for. A
// lighter load (16 connections POSTing, 4 opening new ones) shows it: each
// lost connection costs its client an idle timeout.
func TestNaiveRestartLoses(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l, _ := restarts(t, "naive", 3, 16, 4)
		t.Logf("naive, 3 restarts: %s", l)
		if l.failed == 0 || int64(l.resets)+l.watch.resets.Load() == 0 {
			t.Errorf("the naive restart lost nothing, or saw no stateless reset: %s", l)
		}
	})
}

// udpSNMP returns the namespace's UDP counters (/proc/net/snmp), for the
// log: receive buffer overflows drop datagrams that QUIC then resends.
func udpSNMP() string {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return err.Error()
	}
	var names, values []string
	for _, line := range strings.Split(string(b), "\n") {
		if f, ok := strings.CutPrefix(line, "Udp: "); ok {
			if names == nil {
				names = strings.Fields(f)
			} else {
				values = strings.Fields(f)
			}
		}
	}
	var out []string
	for i := range min(len(names), len(values)) {
		out = append(out, names[i]+"="+values[i])
	}
	return strings.Join(out, " ")
}
