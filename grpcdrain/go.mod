module github.com/zerodrop/zerodrop/grpcdrain

go 1.25.0

// As in go.work: 1.25's containermaxprocs and updatemaxprocs keep cgroup
// files open from process start, which the handoff tests' helpers must not
// inherit.
godebug (
	containermaxprocs=0
	updatemaxprocs=0
)

require (
	github.com/zerodrop/zerodrop v0.0.0
	go.uber.org/zap v1.28.0
	google.golang.org/grpc v1.81.1
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	golang.org/x/crypto v0.48.0 // indirect
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/sys v0.42.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ..
