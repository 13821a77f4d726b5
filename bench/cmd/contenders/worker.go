package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The environment of a worker process: the binary re-executed with envRole set
// runs a server instead of the benchmark.
const (
	envRole = "ZD_BENCH_WORKER" // the worker mode, a key of workerModes
	envAddr = "ZD_BENCH_ADDR"   // the address to serve
	envGen  = "ZD_BENCH_GEN"    // the generation, sent back in X-Generation
	envDir  = "ZD_BENCH_DIR"    // a private directory (pid files, sockets)
	envBPF  = "ZD_BENCH_BPF"    // a bpf filesystem for pins, or ""
)

// shutdownTimeout bounds a worker's graceful shutdown.
const shutdownTimeout = 5 * time.Second

// workerModes are the servers a worker process can run. Each serves until
// ctx ends (SIGTERM or SIGINT), then shuts down its way.
var workerModes = map[string]func(ctx context.Context, w *worker) error{
	"plain":     servePlain,
	"reuseport": serveReuseport,
	"tableflip": serveTableflip,
}

// worker is what a worker mode gets from its environment.
type worker struct {
	addr, gen, dir string
	sigs           chan os.Signal // every signal but SIGTERM and SIGINT
}

// workerMain runs the worker mode named by envRole and exits, or returns if
// this process is not a worker. Call it first in main and TestMain.
func workerMain() {
	mode := os.Getenv(envRole)
	if mode == "" {
		return
	}
	serve, ok := workerModes[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "worker: unknown mode %q\n", mode)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	w := &worker{addr: os.Getenv(envAddr), gen: os.Getenv(envGen), dir: os.Getenv(envDir),
		sigs: make(chan os.Signal, 1)}
	if w.gen == "" {
		w.gen = strconv.Itoa(os.Getpid()) // processes that upgrade themselves
	}
	signal.Notify(w.sigs, syscall.SIGHUP, syscall.SIGUSR2)
	err := serve(ctx, w)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %s gen %s: %v\n", mode, w.gen, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// ready tells the parent that this process serves: "ready <pid> <gen>" on
// stdout, which the parent reads line by line.
func (w *worker) ready() { fmt.Printf("ready %d %s\n", os.Getpid(), w.gen) }

// handler answers every request with "ok" and the worker's generation.
func (w *worker) handler() http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("X-Generation", w.gen)
		rw.Write([]byte("ok\n"))
	})
}

// newServer is the plain http.Server every Go contender runs.
func newServer(w *worker) *http.Server {
	return &http.Server{Handler: w.handler(), ReadHeaderTimeout: 5 * time.Second}
}

// serveUntil serves ln with a plain http.Server until ctx ends, then calls
// Shutdown, as most Go servers do.
func (w *worker) serveUntil(ctx context.Context, ln net.Listener) error {
	srv := newServer(w)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	w.ready()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	return shutdown(srv, done)
}

// shutdown calls srv.Shutdown, bounded by shutdownTimeout, and waits for
// Serve (whose result done carries) to return.
func shutdown(srv *http.Server, done <-chan error) error {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		srv.Close()
	}
	<-done
	return err
}

// servePlain listens with net.Listen, as most Go programs do (Go 1.24+ makes
// it an MPTCP socket; the load's clients are plain TCP).
func servePlain(ctx context.Context, w *worker) error {
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		return err
	}
	return w.serveUntil(ctx, ln)
}

// serveReuseport listens the way most Go code bases do with SO_REUSEPORT: a
// net.ListenConfig whose Control sets the option (Go's defaults otherwise,
// so MPTCP since Go 1.24), and shuts down like any Go server:
// http.Server.Shutdown.
func serveReuseport(ctx context.Context, w *worker) error {
	lc := net.ListenConfig{Control: setReusePort}
	ln, err := lc.Listen(ctx, "tcp", w.addr)
	if err != nil {
		return err
	}
	return w.serveUntil(ctx, ln)
}

// setReusePort is the Control function found in most code bases.
func setReusePort(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	}); err != nil {
		return err
	}
	return os.NewSyscallError("setsockopt SO_REUSEPORT", serr)
}
