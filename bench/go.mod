// The benchmarks live in their own module so that the library's go.mod stays
// lean: nothing here is a dependency of github.com/zerodrop/zerodrop.
//
// Dependencies, and why:
//   - github.com/HdrHistogram/hdrhistogram-go: latencies span microseconds
//     (loopback) to seconds (a SYN retransmit after a dropped SYN); an HDR
//     histogram records every one of them in fixed memory with 3 significant
//     digits, merges per-bucket histograms exactly, and is the standard that
//     wrk2 and friends use, so our percentiles compare with theirs.
//   - go.uber.org/goleak: tests prove that Run leaves no goroutine behind
//     (already a dependency of the library's own tests).
module github.com/zerodrop/zerodrop/bench

go 1.24.0

require (
	github.com/zerodrop/zerodrop v0.0.0
	go.uber.org/goleak v1.3.0
)

require github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect

// The harness drives the library's strategies from this tree, not a release.
replace github.com/zerodrop/zerodrop => ../
