module github.com/zerodrop/zerodrop/tlsresume/chacha

go 1.25.0

require (
	github.com/zerodrop/zerodrop v0.0.0
	go.uber.org/goleak v1.3.0
	golang.org/x/crypto v0.48.0
)

require golang.org/x/sys v0.42.0 // indirect

// Built against this tree, not a release.
replace github.com/zerodrop/zerodrop => ../..
