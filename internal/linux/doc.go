// Package linux is zerodrop's one seam to the kernel's text interfaces: sysctls,
// the SNMP counters in /proc/net, and TCP_INFO on a listening socket.
//
// Everything here reads the network namespace of the calling OS thread (through
// /proc/thread-self), with the goroutine locked to its thread while it does, so a
// test or a program that moves threads between namespaces gets the namespace it
// asked for.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package linux
