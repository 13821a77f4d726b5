package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os/exec"
)

// Reading the --json output, for example in CI: fail when a lossless
// strategy lost a request. (Runs the command, which needs root or user
// namespaces and about 40 s: compile-only.)
func Example() {
	out, err := exec.Command("go", "run", "./cmd/rollout", "--json").Output()
	if err != nil {
		log.Fatal(err)
	}
	var res struct {
		Strategies []struct {
			Name          string           `json:"name"`
			Restarts      int              `json:"restarts"`
			Requests      int64            `json:"requests"`
			Failed        int64            `json:"failed"`
			FailedByClass map[string]int64 `json:"failed_by_class"`
			P99MSRestart  float64          `json:"p99_ms_restart"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		log.Fatal(err)
	}
	for _, s := range res.Strategies {
		fmt.Printf("%s: %d of %d requests failed over %d restarts %v\n", s.Name, s.Failed, s.Requests, s.Restarts, s.FailedByClass)
		if s.Name != "close" && s.Failed > 0 {
			log.Fatalf("%s lost requests", s.Name)
		}
	}
}
