module github.com/zerodrop/zerodrop/examples

go 1.25.0

// As in go.work: 1.25's containermaxprocs and updatemaxprocs keep cgroup
// files open from process start, which examples/systemd's helpers must not
// inherit.
godebug (
	containermaxprocs=0
	updatemaxprocs=0
)

require (
	github.com/gorilla/websocket v1.5.3
	github.com/zerodrop/zerodrop v0.0.0
	github.com/zerodrop/zerodrop/stats/promstats v0.0.0-00010101000000-000000000000
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.42.0
	google.golang.org/grpc v1.81.1
)

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	golang.org/x/crypto v0.48.0 // indirect
	golang.org/x/net v0.51.0 // indirect
	golang.org/x/text v0.34.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	github.com/zerodrop/zerodrop/grpcdrain v0.0.0
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ..

replace github.com/zerodrop/zerodrop/stats/promstats => ../stats/promstats

replace github.com/zerodrop/zerodrop/grpcdrain => ../grpcdrain
