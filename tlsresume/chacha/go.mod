module github.com/zerodrop/zerodrop/tlsresume/chacha

go 1.24.0

require (
	github.com/zerodrop/zerodrop v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/crypto v0.41.0
)

require (
	go.uber.org/multierr v1.10.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sys v0.40.0 // indirect
)

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ../..
