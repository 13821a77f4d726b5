// Package neterr builds the *net.OpError that zerodrop's public operations
// return: op, network and address set once, the cause wrapped with %w
// semantics (errors.Is and errors.As see through it).
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package neterr
