// Command zdworker is the lean worker binary of cmd/contenders: every server
// the benchmark restarts runs from it, with the worker mode and its
// parameters in the environment (package internal/worker). It links only
// what the servers need, none of the harness's plotting, so that a restarted
// server pays the package init of a real service binary, not the
// harness's: that init sits in the accept gap of the contenders that stop a
// process before starting the next.
//
//	go build -o /tmp/ ./cmd/contenders ./cmd/zdworker ./cmd/zdworker-steer ./cmd/zdworker-tableflip
//
// contenders runs /tmp/zdworker, beside itself, unless told otherwise with
// -worker. Run by hand without ZD_BENCH_WORKER, zdworker exits with status 2.
package main

import (
	"fmt"
	"os"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
)

func main() {
	worker.Main()
	fmt.Fprintln(os.Stderr, "zdworker: ZD_BENCH_WORKER not set")
	os.Exit(2)
}
