// Command zdworker-steer is cmd/zdworker with the worker mode "steer" too
// (package internal/worker/steerworker): the only worker that links the eBPF
// library. cmd/contenders runs it, from beside zdworker, for zd-steer.
package main

import (
	"fmt"
	"os"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/steerworker"
)

func main() {
	worker.Main()
	fmt.Fprintln(os.Stderr, "zdworker-steer: ZD_BENCH_WORKER not set")
	os.Exit(2)
}
