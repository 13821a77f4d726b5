//go:build !linux

package tlstest

// zerodrop is Linux-only (see the package doc): on any other system the build
// stops here, on this undefined name.
const _ = zerodrop_supports_Linux_only
