package zerodrop_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// generationMain is one generation of a service built on Serve: it answers
// every request with its pid, prints "serving <generation> <pid> <addr>" once
// served and "report <generation> <cause> <method> <lost> <idle closed>
// <handed over> <tls pending> <tls pending served> <close spread> <handed
// over with TLS> <TLS not handed over>" when Serve returns
// (cause with '_' for spaces; lost: queued connections and requests the
// drain could not serve; idle closed: keep-alive connections the drain
// closed idle; handed over: connections passed to the successor; tls
// pending: TLS connections whose handshake or first request was still to
// come at the stop, and of those served; close spread: the window the
// keep-alive connections were told to close over, in ms, from
// ZD_CLOSE_SPREAD; the TLS connections passed with their session, and those
// that could not be, with ZD_TLS_HANDOFF=1: Options.TLSHandoff).
//
// ZD_UID=<uid> makes it that user (and group) first, ZD_NODUMP=1 not
// dumpable (as a setcap binary is); ZD_PIDFILE is Options.Handoff.PIDFile, and with
// ZD_BREAK_PIDFILE=1 a successor removes the PID file's directory before
// its Ready (which then fails, its predecessor still serving).
// ZD_TERM_PRED=listen makes a successor send SIGTERM to its predecessor (its
// parent) once it has its listeners (the predecessor waits for its ready),
// ZD_TERM_PRED=serving right after its Ready (the predecessor sent done), as
// a deploy tool that stops the old generation once the new one is up. An error
// prints the report first when Serve drained.
func generationMain() {
	if err := becomeTestUser(); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d\n", os.Getpid())
	})}
	if f := os.Getenv("ZD_CERT"); f != "" {
		cert, err := tls.LoadX509KeyPair(f, os.Getenv("ZD_KEY"))
		if err != nil {
			fmt.Printf("error %v\n", err)
			os.Exit(1)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	spread, _ := time.ParseDuration(os.Getenv("ZD_CLOSE_SPREAD"))
	rep, err := zerodrop.Serve(context.Background(), srv, []string{os.Getenv("ZD_ADDR")}, zerodrop.Options{
		Config: zerodrop.Config{
			Handoff:   handoff.Config{Path: os.Getenv("ZD_SOCK"), PIDFile: os.Getenv("ZD_PIDFILE")},
			Successor: zerodrop.ReExec,
			Grace:     10 * time.Second,
			OnListen: func(gen uint64, _ []net.Addr) {
				if gen > 1 && os.Getenv("ZD_BREAK_PIDFILE") != "" {
					os.RemoveAll(filepath.Dir(os.Getenv("ZD_PIDFILE")))
				}
				if gen > 1 && os.Getenv("ZD_TERM_PRED") == "listen" {
					syscall.Kill(os.Getppid(), syscall.SIGTERM)
				}
			},
			OnServing: func(gen uint64, addrs []net.Addr) {
				fmt.Printf("serving %d %d %s\n", gen, os.Getpid(), addrs[0])
				if gen > 1 && os.Getenv("ZD_TERM_PRED") == "serving" {
					syscall.Kill(os.Getppid(), syscall.SIGTERM)
				}
			},
		},
		Drain:         func(_ string, s *drain.Server) { s.CloseSpread = spread },
		ReadyPath:     "/ready",
		NoConnHandoff: os.Getenv("ZD_NO_CONN_HANDOFF") != "",
		TLSHandoff:    os.Getenv("ZD_TLS_HANDOFF") != "",
		Pool:          os.Getenv("ZD_POOL"),
	})
	if rep != nil && len(rep.Drains) > 0 && rep.Drains[0] != nil {
		d := rep.Drains[0]
		fmt.Printf("report %d %s %s %d %d %d %d %d %d %d %d\n", rep.Generation, strings.ReplaceAll(rep.Cause, " ", "_"), d.Method,
			d.Remainder+len(d.HTTP.Forced), d.HTTP.IdleClosed, d.HTTP.HandedOver, d.HTTP.TLSPending, d.HTTP.TLSPendingServed, d.HTTP.CloseSpread.Milliseconds(),
			d.HTTP.HandedOverTLS, d.HTTP.TLSNotHandedOver)
	}
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

// becomeTestUser applies ZD_UID and ZD_NODUMP (see generationMain).
func becomeTestUser() error {
	if s := os.Getenv("ZD_UID"); s != "" && s != strconv.Itoa(os.Getuid()) { // a successor inherits the user
		id, err := strconv.Atoi(s)
		if err != nil {
			return err
		}
		if err := syscall.Setgroups(nil); err != nil {
			return err
		}
		if err := syscall.Setgid(id); err != nil {
			return err
		}
		if err := syscall.Setuid(id); err != nil {
			return err
		}
	}
	if os.Getenv("ZD_NODUMP") != "" {
		return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	}
	return nil
}

// TestServeUpgrade runs a service built on Serve through an upgrade and a
// stop under load from Go's http.Transport, a new connection per request:
// SIGHUP makes generation 1 start generation 2 (the same executable, the
// same options), which inherits the listening socket; generation 1 drains
// (release: generation 2 serves the socket); SIGTERM stops generation 2,
// which drains the socket it is now the last holder of. Not one request may
// fail, and the kernel may send no reset.
func TestServeUpgrade(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		serveUpgrade(t, nil)
	})
}

// TestServeUpgradeTLS is TestServeUpgrade for a server with a TLSConfig,
// which Serve serves over TLS: the clients are Go's http.Transport over
// HTTPS, a new connection per request (HTTP/1.1), and HTTP/2 (ALPN h2) with
// keep-alive, four streams at a time on one connection; and curl (--http1.1,
// --http2) in a loop beside them.
func TestServeUpgradeTLS(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "http1.1", true: "h2"}[h2], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				cert := netnstest.NewCert(t)
				tr := &http.Transport{TLSClientConfig: cert.Client(), DisableKeepAlives: !h2, ForceAttemptHTTP2: h2}
				if !h2 {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				t.Cleanup(tr.CloseIdleConnections)
				serveUpgrade(t, &tlsSetup{cert: cert, tr: tr})
			})
		})
	}
}

// curlLoop runs curl (over TLS, HTTP/2 or HTTP/1.1 as the transport is) in
// a loop until the load stops: every response must be complete (curl exits
// 0 with --fail, and the HTTP version is the one asked for).
type curlLoop struct {
	done          chan struct{}
	runs, failed  int
	first, wantHV string
}

func startCurl(t *testing.T, ts *tlsSetup, url string, l *load) *curlLoop {
	t.Helper()
	bin, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("this test needs curl: %v", err)
	}
	c := &curlLoop{done: make(chan struct{}), wantHV: "1.1"}
	proto := "--http1.1"
	if ts.tr.ForceAttemptHTTP2 {
		proto, c.wantHV = "--http2", "2"
	}
	go func() {
		defer close(c.done)
		for c.runs < 2000 && !l.stopped.Load() {
			// Run waits for curl: every one ends here, by its pid.
			out, err := exec.Command(bin, "-sS", "--fail", "--max-time", "10", proto, "--cacert", ts.cert.CertFile,
				"-o", "/dev/null", "-w", "%{http_version}", url).CombinedOutput()
			c.runs++
			if err != nil || !strings.HasSuffix(string(out), c.wantHV) {
				c.failed++
				if c.first == "" {
					c.first = fmt.Sprintf("%v: %s", err, out)
				}
			}
		}
	}()
	return c
}

func (c *curlLoop) check(t *testing.T) {
	t.Helper()
	<-c.done
	t.Logf("curl %s: %d runs, %d failed", c.wantHV, c.runs, c.failed)
	if c.failed != 0 || c.runs == 0 {
		t.Errorf("curl: %d of %d failed (first: %s); want 0 of at least 1", c.failed, c.runs, c.first)
	}
}

// tlsSetup is the certificate a generation serves and the clients' transport.
type tlsSetup struct {
	cert *netnstest.Cert
	tr   *http.Transport
}

func serveUpgrade(t *testing.T, ts *tlsSetup) {
	{
		bin := netnstest.ExecutableCopy(t)
		sock := filepath.Join(t.TempDir(), "handoff.sock")
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=generation", "ZD_SOCK=" + sock, "ZD_ADDR=" + addr}
		url, tr := "http://"+addr+"/", &http.Transport{DisableKeepAlives: true}
		if ts != nil {
			// Options.Drain reaches the drain (the report says it).
			env = append(env, "ZD_CERT="+ts.cert.CertFile, "ZD_KEY="+ts.cert.KeyFile, "ZD_CLOSE_SPREAD=200ms")
			url, tr = "https://"+addr+"/", ts.tr
		}
		s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
		pid1 := servingPID(t, s.Expect(t, "serving 1 "))
		before := netnstest.Snapshot(t)

		l := startLoad(t, url, tr)
		var curl *curlLoop
		if ts != nil {
			curl = startCurl(t, ts, url, l)
		}
		l.waitFor(t, pid1, 100)
		if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pid2 := servingPID(t, s.Expect(t, "serving 2 "))
		rep1 := strings.Fields(s.Expect(t, "report 1 "))
		if ws := s.Reap(t, pid1, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 1 exited with %v", ws)
		}
		l.waitFor(t, pid2, 200)
		failed, answered, firstErr := l.stop()
		if curl != nil {
			curl.check(t)
		}
		if err := syscall.Kill(pid2, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		rep2 := strings.Fields(s.Expect(t, "report 2 "))
		if ws := s.Reap(t, pid2, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation 2 exited with %v", ws)
		}
		d := before.Delta(t, "Tcp.OutRsts", "TcpExt.ListenDrops")
		t.Logf("answered %v, failed %d; generation 1 %v; generation 2 %v; counters %v", answered, failed, rep1[2:], rep2[2:], d)
		if want := []string{"successor_ready", string(drain.MethodRelease), "0"}; strings.Join(rep1[2:5], " ") != strings.Join(want, " ") {
			t.Errorf("generation 1 stopped with %v, want %v", rep1[2:], want)
		}
		if want := map[bool]string{false: "0", true: "200"}[ts != nil]; len(rep1) < 10 || rep1[9] != want {
			t.Errorf("generation 1's drain spread its closes over %v ms (field 9 of %v), want %s", rep1[min(9, len(rep1)-1)], rep1, want)
		}
		if want := []string{"terminated", string(drain.MethodAccept), "0"}; strings.Join(rep2[2:5], " ") != strings.Join(want, " ") {
			t.Errorf("generation 2 stopped with %v, want %v", rep2[2:], want)
		}
		// Over TLS, closes reset (data such as close_notify arriving at a
		// socket its owner has closed), so Tcp.OutRsts cannot tell a lost
		// connection there: the drains' own accounting (0 lost) and the
		// clients (0 failed) do.
		if failed > 0 || d["TcpExt.ListenDrops"] != 0 ||
			(ts == nil && d["Tcp.OutRsts"] != 0) {
			t.Errorf("%d requests failed (first: %v), counters %v; want 0 and +0 (Tcp.OutRsts not checked over TLS)", failed, firstErr, d)
		}
		if ts != nil && ts.tr.ForceAttemptHTTP2 && l.proto["HTTP/2.0"] != answered[pid1]+answered[pid2] {
			t.Errorf("protocols %v, want HTTP/2.0 only", l.proto)
		}
	}
}

func servingPID(t *testing.T, line string) int {
	t.Helper()
	f := strings.Fields(line)
	pid, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return pid
}

// load is four clients requesting url in a loop, a new connection each time,
// for at most two minutes.
type load struct {
	stopped  atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	answered map[int]int // by the pid that answered
	proto    map[string]int
	failed   int
	firstErr error
}

func startLoad(t *testing.T, url string, tr *http.Transport) *load {
	l := &load{answered: map[int]int{}, proto: map[string]int{}}
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	t.Cleanup(func() { l.stop() })
	for range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for !l.stopped.Load() && time.Now().Before(deadline) {
				pid, proto, err := get(c, url)
				l.mu.Lock()
				l.proto[proto]++
				if err != nil {
					l.failed++
					if l.firstErr == nil {
						l.firstErr = err
					}
				} else {
					l.answered[pid]++
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// get requests url once and returns the pid in the answer and the protocol.
func get(c *http.Client, url string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	return doProto(c, req)
}

// do sends req once and returns the pid in the answer.
func do(c *http.Client, req *http.Request) (int, error) {
	pid, _, err := doProto(c, req)
	return pid, err
}

// doProto sends req once and returns the pid in the answer and the protocol.
func doProto(c *http.Client, req *http.Request) (int, string, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, resp.Proto, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, resp.Proto, fmt.Errorf("status %s", resp.Status)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, resp.Proto, err
}

// waitFor waits (60 s at most) until pid has answered n requests.
func (l *load) waitFor(t *testing.T, pid, n int) {
	t.Helper()
	waitAnswered(t, pid, n, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.answered[pid]
	})
}

// waitAnswered waits (60 s at most) until answered, pid's count, reaches n.
func waitAnswered(t *testing.T, pid, n int, answered func() int) {
	t.Helper()
	for range 6000 {
		if answered() >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("pid %d never answered %d requests", pid, n)
}

func (l *load) stop() (int, map[int]int, error) {
	l.stopped.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed, l.answered, l.firstErr
}

// TestServeBadInput: each mistake is a typed error, and nothing is left open.
func TestServeBadInput(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		srv := &http.Server{}
		if _, err := zerodrop.Serve(ctx, nil, []string{"127.0.0.1:0"}, zerodrop.Options{}); !errors.Is(err, drain.ErrNoHTTPServer) {
			t.Errorf("nil server: %v, want ErrNoHTTPServer", err)
		}
		if _, err := zerodrop.Serve(ctx, srv, nil, zerodrop.Options{}); !errors.Is(err, zerodrop.ErrNoAddress) {
			t.Errorf("no address: %v, want ErrNoAddress", err)
		}
		// The second address is taken: the first listener must be closed.
		taken, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		var oe *net.OpError
		if _, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0", taken.Addr().String()}, zerodrop.Options{}); !errors.As(err, &oe) || !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("address in use: %v, want a *net.OpError wrapping EADDRINUSE", err)
		}
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		var ip *handoff.InsecurePathError
		if _, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0"}, zerodrop.Options{Config: zerodrop.Config{Handoff: handoff.Config{Path: filepath.Join(dir, "h.sock")}}}); !errors.As(err, &ip) {
			t.Errorf("handoff socket in a world-writable directory: %v, want *handoff.InsecurePathError", err)
		}
	})
}

// TestServeHijacked: Options.Drain reaches every listener's
// drain.Server, here its Hijacked. A connection hijacked on each of two addresses is
// given to it once the stop begins (here it writes a line and closes), and
// each drain's report counts one; without it nobody tells the connections
// anything and the reports count none.
func TestServeHijacked(t *testing.T) {
	for _, set := range []bool{true, false} {
		t.Run(map[bool]string{true: "set", false: "unset"}[set], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				serveHijacked(t, set)
			})
		})
	}
}

func serveHijacked(t *testing.T, set bool) {
	hijacked := make(chan net.Conn, 2)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		io.WriteString(c, "hijacked\n")
		hijacked <- c
	})}
	var notified atomic.Int32
	served := make(chan []net.Addr, 1)
	opts := zerodrop.Options{Config: zerodrop.Config{Grace: 5 * time.Second, OnServing: func(_ uint64, addrs []net.Addr) { served <- addrs }}}
	if set {
		opts.Drain = func(_ string, s *drain.Server) {
			s.Hijacked = func(c net.Conn) {
				notified.Add(1)
				io.WriteString(c, "going away\n")
				c.Close()
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep *zerodrop.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := zerodrop.Serve(ctx, srv, []string{"127.0.0.1:0", "127.0.0.1:0"}, opts)
		done <- result{rep, err}
	}()
	var addrs []net.Addr
	select {
	case addrs = <-served:
	case r := <-done:
		t.Fatalf("Serve returned before serving: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a.String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if line := readLine(t, c); line != "hijacked\n" {
			t.Fatalf("%s answered %q, want the hijacking handler's line", a, line)
		}
	}
	cancel()
	r := <-done
	if r.err != nil || len(r.rep.Drains) != 2 {
		t.Fatalf("Serve: %v, %+v", r.err, r.rep)
	}
	want := map[bool]int{true: 1, false: 0}[set]
	for i, d := range r.rep.Drains {
		if d.HTTP.HijackedNotified != want {
			t.Errorf("address %d: report counts %d hijacked connections notified, want %d", i, d.HTTP.HijackedNotified, want)
		}
	}
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		line := readLine(t, c)
		if set && line != "going away\n" || !set && line != "" {
			t.Errorf("client %d read %q after the stop, want %q", i, line, map[bool]string{true: "going away\n"}[set])
		}
	}
	if int(notified.Load()) != 2*want {
		t.Errorf("Hijacked called %d times, want %d", notified.Load(), 2*want)
	}
	for range addrs {
		(<-hijacked).Close() // closed already by the callback when set
	}
}

// readLine reads from c up to a newline, or what came before an error.
func readLine(t *testing.T, c net.Conn) string {
	t.Helper()
	var b []byte
	one := make([]byte, 1)
	for len(b) < 1024 {
		if _, err := c.Read(one); err != nil {
			break
		}
		b = append(b, one[0])
		if one[0] == '\n' {
			break
		}
	}
	return string(b)
}
