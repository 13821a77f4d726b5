// Command worker-plain is the memory baseline of bench/micro's
// BenchmarkWorkerRSS: an HTTP server on net.Listen with http.Server, and
// nothing of zerodrop. It prints its address, serves until SIGTERM, and
// answers GET /rss with its VmRSS in KiB.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/bench/internal/rss"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker-plain:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: rss.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Println(ln.Addr())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
}
