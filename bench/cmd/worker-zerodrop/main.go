// Command worker-zerodrop is the server of bench/micro's BenchmarkWorkerRSS
// with the library: its listener comes from handoff (a reuseport socket,
// plain TCP) and drain.Server serves it. It prints its address, serves until
// SIGTERM, and answers GET /rss with its VmRSS in KiB.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/bench/internal/rss"
	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker-zerodrop:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "worker-zerodrop-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	u, err := handoff.New(ctx, handoff.Config{Path: filepath.Join(dir, "handoff.sock")})
	if err != nil {
		return err
	}
	defer u.Close()
	ln, err := u.Listen(ctx, "http", "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ds := &drain.Server{HTTP: &http.Server{Handler: rss.Handler(), ReadHeaderTimeout: 5 * time.Second}}
	go ds.Serve(ln)
	if err := u.Ready(); err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = ds.Shutdown(sctx)
	return err
}
