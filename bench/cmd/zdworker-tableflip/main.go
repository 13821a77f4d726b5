// Command zdworker-tableflip is cmd/zdworker with the worker mode
// "tableflip" too (package internal/worker/flipworker): the only worker that
// links github.com/cloudflare/tableflip. cmd/contenders runs it, from beside
// zdworker, for the tableflip contender.
package main

import (
	"fmt"
	"os"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	_ "github.com/zerodrop/zerodrop/bench/internal/worker/flipworker"
)

func main() {
	worker.Main()
	fmt.Fprintln(os.Stderr, "zdworker-tableflip: ZD_BENCH_WORKER not set")
	os.Exit(2)
}
