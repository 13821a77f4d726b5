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

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
	"go.uber.org/zap"
)

// The environment a worker gets from the supervisor.
const (
	envSlot      = "ZERODROP_WORKER_SLOT"
	envGen       = "ZERODROP_WORKER_GENERATION"
	envAddr      = "ZERODROP_WORKER_ADDR"
	envMigration = "ZERODROP_WORKER_MIGRATION"
	envGrace     = "ZERODROP_WORKER_GRACE"
	envWork      = "ZERODROP_WORKER_WORK"
)

func isWorker() bool { return os.Getenv(envSlot) != "" }

// env is what a worker of generation gen in slot needs to know.
func (c config) env(slot, gen int) []string {
	return []string{
		envSlot + "=" + strconv.Itoa(slot), envGen + "=" + strconv.Itoa(gen), envAddr + "=" + c.addr,
		envMigration + "=" + c.migration, envGrace + "=" + c.grace.String(), envWork + "=" + c.work.String(),
	}
}

// workerMain listens, tells the supervisor, serves until SIGTERM, and stops
// without losing a connection.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log, err := zap.NewProduction()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer log.Sync()
	slot, _ := strconv.Atoi(os.Getenv(envSlot))
	gen, _ := strconv.Atoi(os.Getenv(envGen))
	grace, err1 := time.ParseDuration(os.Getenv(envGrace))
	work, err2 := time.ParseDuration(os.Getenv(envWork))
	if err1 != nil || err2 != nil {
		log.Error("bad worker environment", zap.NamedError("grace", err1), zap.NamedError("work", err2))
		return 1
	}
	log = log.With(zap.Int("worker", slot), zap.Int("generation", gen), zap.Int("pid", os.Getpid()))

	cfg := reuseport.Config{Migration: reuseport.MigrationRequire, Logger: log}
	if os.Getenv(envMigration) == "enable" {
		cfg.Migration = reuseport.MigrationEnable
	}
	addr := os.Getenv(envAddr)
	hub := new(stats.Hub)
	hub.SetGeneration(uint64(gen))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promstats.Handler(hub, promstats.Options{Groups: []promstats.Group{{Listener: "http", Addr: addr}}}))
	mux.Handle("/", handler(gen, slot, work))
	// Serve without a handoff: a fresh reuseport member (or a socket systemd
	// passed), drained on SIGTERM within grace: readiness fails, the
	// listener stops without losing its queue (with siblings and
	// tcp_migrate_req=1 it migrates to them), every accepted connection's
	// request is answered, and only then http.Server.Shutdown runs. The
	// drain's report is logged once.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: grace}
	_, err = zerodrop.Serve(ctx, srv, []string{addr}, zerodrop.Options{
		Config: zerodrop.Config{Handoff: handoff.Config{Listen: cfg}, Grace: grace, Logger: log,
			OnListen: func(uint64, []net.Addr) { // the supervisor waits for this line on fd 3
				ready := os.NewFile(3, "ready")
				fmt.Fprintln(ready, "ready")
				ready.Close()
			}},
		ReadyPath: "/ready",
	})
	if err != nil {
		log.Error("serve", zap.Error(err))
		return 1
	}
	log.Info("stopped")
	return 0
}

func handler(gen, slot int, work time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if work > 0 {
			t := time.NewTimer(work)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("X-Generation", strconv.Itoa(gen))
		fmt.Fprintf(w, "generation %d worker %d pid %d\n", gen, slot, os.Getpid())
	})
}
