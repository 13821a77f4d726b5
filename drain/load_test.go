package drain_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

const (
	envWorkerAddr = "DRAIN_TEST_ADDR"
	envWorkerCert = "DRAIN_TEST_CERT" // with envWorkerKey: serve HTTPS (ServeTLS)
	envWorkerKey  = "DRAIN_TEST_KEY"
)

// workerMain is a worker process: it waits for a line on stdin, joins the
// group on $DRAIN_TEST_ADDR, says "ready", serves until SIGTERM, drains and
// prints its report as JSON.
func workerMain() {
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		os.Exit(0) // the test ended before it needed us
	}
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	l, err := cfg.Listen(context.Background(), "tcp4", os.Getenv(envWorkerAddr))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	srv := &drain.Server{HTTP: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(time.Millisecond) // some work
		io.WriteString(w, "ok\n")
	})}}
	served := make(chan error, 1)
	go func() {
		if f := os.Getenv(envWorkerCert); f != "" {
			served <- srv.ServeTLS(l, f, os.Getenv(envWorkerKey))
			return
		}
		served <- srv.Serve(l)
	}()
	fmt.Println("ready")
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := srv.Shutdown(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker shutdown:", err)
	}
	json.NewEncoder(os.Stdout).Encode(rep)
	<-served
}

// worker is a worker process, started ahead of time and told to listen later
// (a race-instrumented binary takes long to start on a loaded machine).
type worker struct {
	p     *netnstest.Proc
	out   *bufio.Reader
	start *os.File // write end of its stdin
}

func spawnWorker(t *testing.T, addr string, env ...string) *worker {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := netnstest.StartHelper(t, "worker", netnstest.HelperOptions{Stdin: r,
		Env: append([]string{envWorkerAddr + "=" + addr, "GORACE=atexit_sleep_ms=0"}, env...)})
	r.Close()
	t.Cleanup(func() { w.Close() })
	return &worker{p: p, out: bufio.NewReader(p.Stdout), start: w}
}

// listen tells the worker to join the group and waits until it serves.
func (w *worker) listen(t *testing.T) *worker {
	t.Helper()
	if _, err := w.start.WriteString("listen\n"); err != nil {
		t.Fatal(err)
	}
	if line := w.line(t); line != "ready" {
		t.Fatalf("worker said %q", line)
	}
	return w
}

func (w *worker) line(t *testing.T) string {
	t.Helper()
	w.p.Stdout.SetReadDeadline(time.Now().Add(20 * time.Second))
	s, err := w.out.ReadString('\n')
	if err != nil {
		t.Fatalf("worker output: %q, %v", s, err)
	}
	return strings.TrimSpace(s)
}

// drain stops the worker and returns its report.
func (w *worker) drain(t *testing.T) *drain.Report {
	t.Helper()
	if err := w.p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rep drain.Report
	if err := json.Unmarshal([]byte(w.line(t)), &rep); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.p.Wait(ctx); err != nil {
		t.Fatalf("worker exit: %v", err)
	}
	return &rep
}

// stats counts one kind of client's requests.
type stats struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       map[string]int
}

func (st *stats) record(err error) {
	if err == nil {
		st.ok.Add(1)
		return
	}
	st.failed.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.errs == nil {
		st.errs = map[string]int{}
	}
	st.errs[netnstest.Classify(err).String()+": "+err.Error()]++
}

func (st *stats) String() string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return fmt.Sprintf("%d ok, %d failed %v", st.ok.Load(), st.failed.Load(), st.errs)
}

// loop calls do until stop closes.
func loop(stop <-chan struct{}, st *stats, do func() error) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		st.record(do())
	}
}

// keepAliveClient reuses one connection and never retries: a request that
// fails is a failure; after Connection: close it dials anew.
type keepAliveClient struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

func (k *keepAliveClient) do() error {
	if k.c == nil {
		c, err := net.DialTimeout("tcp4", k.addr, 5*time.Second)
		if err != nil {
			return err
		}
		k.c, k.br = c, bufio.NewReader(c)
	}
	k.c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err := k.c.Write(keepAliveRequest("/"))
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(k.br, nil)
	}
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err != nil || resp.Close {
		k.close()
	}
	return err
}

func (k *keepAliveClient) close() {
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// oneRequest never retries: dial, send, read the whole response.
func oneRequest(addr string) error {
	c, err := net.DialTimeout("tcp4", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(request("/")); err != nil {
		return err
	}
	resp, body, err := readResponse(c, 10*time.Second)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || body != "ok\n" {
		return fmt.Errorf("status %d body %q", resp.StatusCode, body)
	}
	return nil
}

// TestRollingUnderLoad: two worker processes and closed-loop clients for at
// least 5 s, one worker drained and replaced every 250 ms (or as fast as the
// machine starts workers), until at least 10 rolls and 500 answered requests
// of each client (on a loaded machine that takes longer: the rolls go on
// until then). Clients: a new connection per
// request, Go's http.Transport with keep-alives, and a keep-alive client that
// never retries. With migration on, the first two never fail (asserted). With
// it off, the window between the last empty check and close remains; that, and
// the idle-close race of the never-retrying client, are measured and logged.
func TestRollingUnderLoad(t *testing.T) {
	for _, migrate := range []int{1, 0} {
		t.Run(fmt.Sprintf("migrate=%d", migrate), func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: migrate}, func(t *testing.T) {
				rollingUnderLoad(t, migrate == 1)
			})
		})
	}
}

func rollingUnderLoad(t *testing.T, migrate bool) {
	l := listenTCP(t, "127.0.0.1:0") // reserve a port number
	addr := l.Addr().String()
	l.Close()
	workers := []*worker{spawnWorker(t, addr).listen(t), spawnWorker(t, addr).listen(t)}
	spares := []*worker{spawnWorker(t, addr), spawnWorker(t, addr)}
	perRequest, transport, noRetry := &stats{}, &stats{}, &stats{}
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	get := func() error {
		resp, err := hc.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case i < 6:
				loop(stop, perRequest, func() error { return oneRequest(addr) })
			case i < 9:
				loop(stop, transport, get)
			default:
				k := &keepAliveClient{addr: addr}
				defer k.close()
				loop(stop, noRetry, k.do)
			}
		}()
	}
	var total drain.Report
	rolls := 0
	start := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	// Enough exercised: 5 s, 10 rolls and 500 requests of each client.
	// On a loaded machine that takes longer; 120 s bounds a hang.
	enough := func() bool {
		return time.Since(start) >= 5*time.Second && rolls >= 10 &&
			perRequest.ok.Load() >= 500 && transport.ok.Load() >= 500 && noRetry.ok.Load() >= 500
	}
	for !enough() && time.Since(start) < 120*time.Second {
		<-tick.C
		spares = append(spares, spawnWorker(t, addr))
		next := spares[0].listen(t)
		spares = spares[1:]
		rep := workers[0].drain(t)
		workers = append(workers[1:], next)
		rolls++
		total.QueuedAtStop += rep.QueuedAtStop
		total.Migrated += rep.Migrated
		total.Accepted += rep.Accepted
		total.Remainder += rep.Remainder
		if rep.Method != map[bool]drain.Method{true: drain.MethodMigrate, false: drain.MethodAccept}[migrate] {
			t.Errorf("roll %d: method %s (%s)", rolls, rep.Method, rep.Why)
		}
	}
	tick.Stop()
	close(stop)
	wg.Wait()
	for _, w := range workers {
		w.drain(t)
	}
	for _, w := range spares {
		w.start.Close() // it exits without listening
	}
	t.Logf("migrate=%v: %d rolls in %v; new connection per request: %v; http.Transport keep-alive: %v; keep-alive, never retrying: %v; reports: queued %d migrated %d accepted %d remainder %d",
		migrate, rolls, time.Since(start).Round(time.Millisecond), perRequest, transport, noRetry,
		total.QueuedAtStop, total.Migrated, total.Accepted, total.Remainder)
	if rolls < 10 || perRequest.ok.Load() < 500 || transport.ok.Load() < 500 || noRetry.ok.Load() < 500 {
		t.Errorf("too little exercised: %d rolls, %d/%d/%d requests", rolls, perRequest.ok.Load(), transport.ok.Load(), noRetry.ok.Load())
	}
	if migrate && (perRequest.failed.Load() != 0 || transport.failed.Load() != 0) {
		t.Errorf("failed with migration on, want 0: per request %v; transport %v", perRequest, transport)
	}
}
