package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment of a worker process, set by the runner.
const (
	envStrategy = "ZERODROP_ROLLOUT_STRATEGY"
	envGen      = "ZERODROP_ROLLOUT_GENERATION"
	envSlot     = "ZERODROP_ROLLOUT_SLOT" // the slot of the group the worker serves in (or will)
	envAddr     = "ZERODROP_ROLLOUT_ADDR"
	envHandoff  = "ZERODROP_ROLLOUT_HANDOFF" // handoff socket path
	envBPF      = "ZERODROP_ROLLOUT_BPFFS"   // bpf filesystem for the ebpf strategy
	envCert     = "ZERODROP_ROLLOUT_CERT"    // with envKey: serve TLS with this certificate (PEM file)
	envKey      = "ZERODROP_ROLLOUT_KEY"
)

// The line protocol between runner and worker. On stdout the worker writes
// lineReady once it serves, lineSwitched once it has taken over from its
// predecessor (handoff), and lineReport with a JSON workerReport once it has
// stopped. On stdin a handoff successor waits for lineGo before it calls
// Ready, so the runner can start it ahead of the restart's moment.
const (
	lineReady    = "ready"
	lineSwitched = "switched"
	lineReport   = "report "
	lineGo       = "go"
)

// stopTimeout bounds a worker's stop: listener drain plus HTTP shutdown.
const stopTimeout = 5 * time.Second

// worker is what a strategy's serve function gets.
type worker struct {
	gen     int    // generation given by the runner (handoff: ignored)
	slot    int    // the slot it serves in: a group's workers are 0..n-1, a successor takes its predecessor's
	addr    string // 127.0.0.1:port, the same for every worker of a run
	handoff string // path of the handoff socket
	bpfDir  string // bpf filesystem for steer's pins
	// ready tells the runner that this worker serves, and which generation
	// it is.
	ready func(gen int)
	// takeOver waits for the runner's go (handoff), then calls ready and
	// reports that this worker took over. It returns ctx.Err() if the worker
	// is stopped first.
	takeOver func(ready func() error) error
}

// workerReport is what a worker says about its stop. Queue figures come from
// the drain report, when the strategy has one.
type workerReport struct {
	PID        int      `json:"pid"`
	Generation int      `json:"generation"`
	Drained    bool     `json:"drained"` // a drain report exists
	Method     string   `json:"method"`
	Why        string   `json:"why,omitempty"`     // the drain report's reason for the method
	Steered    bool     `json:"steered,omitempty"` // marked Draining in the eBPF program first
	Queued     int      `json:"queued_at_stop"`
	Migrated   int      `json:"migrated"`
	Accepted   int      `json:"accepted"`
	Remainder  int      `json:"remainder"`
	Forced     int      `json:"forced"`  // HTTP connections closed at the deadline
	TookMS     float64  `json:"took_ms"` // the stop, as the worker measured it
	RollMS     float64  `json:"roll_ms"` // from the restart (successor serving) to the old server's exit; set by the runner
	Errors     []string `json:"errors,omitempty"`
}

// workerMain runs one server of the strategy named in the environment until
// SIGTERM (or, for handoff, until its successor is ready), then stops it the
// strategy's way and writes its report.
func workerMain(stdout, stderr io.Writer) int {
	s, ok := strategies[os.Getenv(envStrategy)]
	gen, err := strconv.Atoi(os.Getenv(envGen))
	if !ok || err != nil || s.serve == nil {
		fmt.Fprintf(stderr, "rollout worker: bad environment %s=%q %s=%q\n",
			envStrategy, os.Getenv(envStrategy), envGen, os.Getenv(envGen))
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	slot, _ := strconv.Atoi(os.Getenv(envSlot)) // 0 if unset
	w := worker{gen: gen, slot: slot, addr: os.Getenv(envAddr), handoff: os.Getenv(envHandoff), bpfDir: os.Getenv(envBPF)}
	w.ready = func(g int) { fmt.Fprintf(stdout, "%s %d\n", lineReady, g) }
	w.takeOver = func(ready func() error) error {
		if err := awaitGo(ctx, os.Stdin); err != nil {
			return err
		}
		if err := ready(); err != nil {
			return err
		}
		fmt.Fprintln(stdout, lineSwitched)
		return nil
	}
	rep, err := s.serve(ctx, w)
	rep.PID = os.Getpid()
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintf(stdout, "%s%s\n", lineReport, b)
	if err != nil {
		fmt.Fprintf(stderr, "rollout worker %d (%s, generation %d): %v\n", os.Getpid(), s.name, rep.Generation, err)
		return exitError
	}
	return exitOK
}

// awaitGo waits for the runner's go line on r, or for ctx to end.
func awaitGo(ctx context.Context, r io.Reader) error {
	got := make(chan error, 1)
	go func() { // blocks until the runner writes or we exit
		line, err := bufio.NewReader(r).ReadString('\n')
		if err == nil && strings.TrimSpace(line) != lineGo {
			err = fmt.Errorf("got %q", line)
		}
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			return fmt.Errorf("waiting for %q on stdin: %w", lineGo, err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handler answers every request with the worker's generation and pid, so the
// load generator sees which generation served it.
func handler(gen int) http.Handler {
	g, pid := strconv.Itoa(gen), strconv.Itoa(os.Getpid())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Generation", g)
		w.Header().Set("X-Pid", pid)
		io.WriteString(w, "ok\n")
	})
}

// newServer is the http.Server every strategy uses; with envCert and envKey
// it has a TLSConfig with that certificate, and serveHTTP serves it over TLS.
func newServer(gen int) (*http.Server, error) {
	srv := &http.Server{Handler: withMetrics(gen, handler(gen)), ReadHeaderTimeout: 5 * time.Second}
	if os.Getenv(envCert) == "" {
		return srv, nil
	}
	cert, err := tls.LoadX509KeyPair(os.Getenv(envCert), os.Getenv(envKey))
	if err != nil {
		return nil, err
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	return srv, nil
}

// serveHTTP serves srv on ln, over TLS when it has a TLSConfig.
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}
