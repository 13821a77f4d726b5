module github.com/zerodrop/zerodrop

go 1.24.0

require (
	github.com/coreos/go-systemd/v22 v22.7.0
	go.uber.org/goleak v1.3.0
	go.uber.org/zap v1.28.0
	golang.org/x/sys v0.40.0
)

require (
	github.com/stretchr/testify v1.11.1 // indirect
	go.uber.org/multierr v1.10.0 // indirect
)
