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
//   - gonum.org/v1/plot: the latency-over-time picture of every contenders
//     run (SVG), with aligned panels and custom tickers, from a maintained
//     plotting library rather than hand-written SVG.
//   - github.com/cloudflare/tableflip v1.2.3: a contender, what many Go
//     services use today for graceful upgrades.
//   - github.com/quic-go/quic-go (through ../quicdrain): the HTTP/3 servers
//     and client of the -h3 mode. quicdrain's go line, 1.26, becomes ours;
//     the godebug block repeats go.work's (see there).
module github.com/zerodrop/zerodrop/bench

go 1.26.0

godebug (
	containermaxprocs=0
	updatemaxprocs=0
)

require (
	github.com/cloudflare/tableflip v1.2.3
	github.com/quic-go/quic-go v0.65.0
	github.com/zerodrop/zerodrop v0.0.0
	github.com/zerodrop/zerodrop/internal/load v0.0.0-00010101000000-000000000000
	github.com/zerodrop/zerodrop/quicdrain v0.0.0
	github.com/zerodrop/zerodrop/reuseport/steer v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/sys v0.47.0
	gonum.org/v1/plot v0.17.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/cilium/ebpf v0.20.0 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)

// The harness drives the library's strategies from this tree, not a release.
replace github.com/zerodrop/zerodrop => ../

replace (
	github.com/zerodrop/zerodrop/internal/load => ../internal/load
	github.com/zerodrop/zerodrop/quicdrain => ../quicdrain
	github.com/zerodrop/zerodrop/reuseport/steer => ../reuseport/steer
	github.com/zerodrop/zerodrop/stats/promstats => ../stats/promstats
)
