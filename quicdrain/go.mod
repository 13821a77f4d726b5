module github.com/zerodrop/zerodrop/quicdrain

go 1.26.0

// As in go.work: 1.25's containermaxprocs and updatemaxprocs keep cgroup
// files open from process start, which the handoff tests' helpers must not
// inherit.
godebug (
	containermaxprocs=0
	updatemaxprocs=0
)

require (
	github.com/cilium/ebpf v0.20.0
	github.com/quic-go/quic-go v0.65.0
	github.com/zerodrop/zerodrop v0.0.0
	github.com/zerodrop/zerodrop/reuseport/steer v0.0.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.47.0
)

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/quic-go/qpack v0.6.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/crypto v0.54.0 // indirect
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/text v0.40.0 // indirect
)

// Built against this tree, not a release.
replace (
	github.com/zerodrop/zerodrop => ..
	github.com/zerodrop/zerodrop/reuseport/steer => ../reuseport/steer
)
