package drain_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
)

// A worker in a reuseport group that drains on SIGTERM without losing a
// connection or a request. The signal wiring belongs to the program, not to
// the library. (Compile-only: it listens on a real port and waits for a signal.)
func ExampleServer() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg := reuseport.Config{Migration: reuseport.MigrationWarn}
	l, err := cfg.Listen(ctx, "tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := &drain.Server{
		HTTP:   &http.Server{Handler: mux},
		Delay:  5 * time.Second, // let the load balancer see /ready fail
		Logger: zap.NewExample(),
	}
	mux.Handle("/ready", srv.Ready())
	go func() {
		if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := srv.Shutdown(sctx) // the report is also logged once
	if err != nil {
		log.Print(err)
	}
	json.NewEncoder(os.Stdout).Encode(rep)
}

// Wrap alone, under a plain http.Server: its Close, which Shutdown calls,
// stops the listener without losing the queue. (Compile-only.) With siblings
// and migration on, the queue moves to them; otherwise the connections the
// drain accepts reach Serve after Shutdown began, where net/http drops their
// requests (golang/go#65802): use drain.Server for those.
func ExampleWrap() {
	l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	dl, err := drain.Wrap(l, drain.Options{Logger: zap.NewExample()})
	if err != nil {
		log.Fatal(err)
	}
	hs := &http.Server{Handler: http.NotFoundHandler()}
	go hs.Serve(dl)
	// ... later, on the program's signal:
	hs.Shutdown(context.Background())
	log.Printf("%+v", dl.Report())
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
// (Linux 6.1+). (Compile-only.)
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
