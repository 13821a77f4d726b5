package drain_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
)

// A worker in a reuseport group that drains without losing a connection or
// a request: a request in flight when Shutdown begins is answered, /ready
// says 503 from then on (what a load balancer polls during Delay), and Serve
// returns http.ErrServerClosed. A program drains on its own signal, for
// example after <-ctx.Done() of signal.NotifyContext(ctx, syscall.SIGTERM):
// the signal wiring belongs to the program, not to the library. With a
// Logger (zap.NewExample() here would print it), the report is logged once.
func ExampleServer() {
	l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0") // IPPROTO_TCP: drain refuses MPTCP
	if err != nil {
		log.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release // still in flight when the drain begins
		fmt.Fprintln(w, "done")
	})
	srv := &drain.Server{
		HTTP:  &http.Server{Handler: mux},
		Delay: time.Second, // let the load balancer see /ready fail (seconds, in production)
	}
	mux.Handle("/ready", srv.Ready())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	get := func(path string) (string, error) {
		res, err := client.Get("http://" + l.Addr().String() + path)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		return fmt.Sprintf("%s %d %q", path, res.StatusCode, body), err
	}
	slow := make(chan string, 1)
	go func() {
		s, err := get("/slow")
		if err != nil {
			s = err.Error()
		}
		slow <- s
	}()
	<-started

	type result struct {
		rep *drain.Report
		err error
	}
	shut := make(chan result, 1)
	go func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rep, err := srv.Shutdown(sctx)
		shut <- result{rep, err}
	}()
	// The load balancer's view: 503 once the drain began, within Delay.
	for deadline := time.Now().Add(srv.Delay); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if s, err := get("/ready"); err != nil || !strings.HasPrefix(s, "/ready 200") {
			fmt.Println(s, err)
			break
		}
	}
	close(release)
	fmt.Println(<-slow)
	r := <-shut
	fmt.Println("shutdown:", r.err, "lost:", r.rep.Remainder, "forced:", len(r.rep.HTTP.Forced))
	fmt.Println("serve:", <-served)
	// Output:
	// /ready 503 "draining\n" <nil>
	// /slow 200 "done\n"
	// shutdown: <nil> lost: 0 forced: 0
	// serve: http: Server closed
}

// Wrap alone, under a plain http.Server: its Close, which Shutdown calls,
// stops the listener without losing the queue. With siblings and migration
// on, the queue moves to them; otherwise the connections the drain accepts
// reach Serve after Shutdown began, where net/http drops their requests
// (golang/go#65802): use drain.Server for those. Alone in its group, the
// listener is stopped by accepting its queue.
func ExampleWrap() {
	l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	dl, err := drain.Wrap(l, drain.Options{}) // Logger: zap.NewExample() logs the report
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler()}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(dl) }()
	// ... later, on the program's signal:
	if err := hs.Shutdown(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("serve:", <-served)
	rep := dl.Report()
	fmt.Println("method:", rep.Method, "siblings:", rep.Siblings, "lost:", rep.Remainder)
	// Output:
	// serve: http: Server closed
	// method: accept siblings: 0 lost: 0
}

// The connections queued when a listener stops are not lost: the stop
// accepts them (or, with reuseport siblings and migration on, moves them),
// and Accept returns them after it.
func ExampleListener_Close() {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false) // drain stops IPPROTO_TCP listeners
	l, err := lc.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	dl, err := drain.Wrap(l, drain.Options{})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 { // three clients connect; nobody has accepted them yet
		c, err := net.Dial("tcp4", dl.Addr().String())
		if err != nil {
			log.Fatal(err)
		}
		defer c.Close()
	}
	if err := dl.Close(); err != nil {
		log.Fatal(err)
	}
	served := 0
	for {
		c, err := dl.Accept()
		if err != nil { // net.ErrClosed once the drained ones are handed out
			break
		}
		served++
		c.Close()
	}
	rep := dl.Report()
	fmt.Printf("queued at the stop %d, accepted by the drain %d, served %d, lost %d\n", rep.QueuedAtStop, rep.Accepted, served, rep.Remainder)
	// Output: queued at the stop 3, accepted by the drain 3, served 3, lost 0
}

// A worker of a pool that rolls with no privilege and no eBPF, with
// tcp_migrate_req left at 0: worker i (of at least as many workers as
// online CPUs, each successor taking its predecessor's i) prefers CPU i
// modulo the CPUs, and its stop steps out of the group's pick first
// (Linux 6.1+). Compile-only: the method it prints depends on the kernel,
// the machine's CPUs and the other workers of the group, which a single
// test process does not have.
func ExampleOptions_stepOut() {
	worker := 0 // this worker's slot in the pool, from its supervisor
	cpus, err := reuseport.OnlineCPUs()
	if err != nil {
		log.Fatal(err)
	}
	cpu := cpus[worker%len(cpus)]
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore, Options: reuseport.Options{IncomingCPU: &cpu}}
	l, err := cfg.Listen(context.Background(), "tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	srv := &drain.Server{HTTP: &http.Server{Handler: http.NotFoundHandler()}, Listener: drain.Options{StepOut: true}}
	go srv.Serve(l)
	// ... later, on the program's signal:
	rep, _ := srv.Shutdown(context.Background())
	fmt.Println(rep.Method, rep.StepOutRefused) // "step-out" and "", or the method used and why not
}
