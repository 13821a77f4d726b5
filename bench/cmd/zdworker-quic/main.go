// Command zdworker-quic is cmd/zdworker with the worker mode "quic" too
// (package internal/worker/quicworker, HTTP/3 with quic-go and quicdrain):
// the only worker that links quic-go. cmd/contenders runs it, from beside
// zdworker, for the -h3 contenders.
package main

import (
	"fmt"
	"os"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/quicworker"
)

func main() {
	worker.Main()
	fmt.Fprintln(os.Stderr, "zdworker-quic: ZD_BENCH_WORKER not set")
	os.Exit(2)
}
