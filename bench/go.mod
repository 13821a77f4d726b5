module github.com/zerodrop/zerodrop/bench

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
)
