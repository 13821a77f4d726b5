module github.com/zerodrop/zerodrop/internal/load

go 1.24.0

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	go.uber.org/goleak v1.3.0
)

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ../..
