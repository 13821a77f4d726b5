module github.com/zerodrop/zerodrop/cmd

go 1.24.0

require (
	github.com/zerodrop/zerodrop v0.0.0
	github.com/zerodrop/zerodrop/internal/load v0.0.0-00010101000000-000000000000
	github.com/zerodrop/zerodrop/reuseport/steer v0.0.0-00010101000000-000000000000
	github.com/zerodrop/zerodrop/stats/promstats v0.0.0-00010101000000-000000000000
	golang.org/x/sys v0.40.0
)

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/cilium/ebpf v0.20.0 // indirect
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/prometheus/client_model v0.6.2 // indirect
	github.com/prometheus/common v0.66.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/crypto v0.41.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ..

replace github.com/zerodrop/zerodrop/reuseport/steer => ../reuseport/steer

replace github.com/zerodrop/zerodrop/stats/promstats => ../stats/promstats

replace github.com/zerodrop/zerodrop/internal/load => ../internal/load
