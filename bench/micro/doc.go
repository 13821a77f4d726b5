// Package micro holds the micro-benchmarks of issue 7 that no library
// package owns; it has no code outside its tests.
//
//	go test -run '^$' -bench . -benchtime 2000x ./micro/
//
// BenchmarkAcceptKinds accepts from every kind of listener side by side
// (net.Listen with Go's default MPTCP, net.Listen plain TCP, reuseport.Listen,
// drain.Wrap, a handoff listener), alternating single Accepts over
// connections queued beforehand so that all kinds see the same machine load,
// and reports each kind's median time per Accept and its throughput relative
// to plain-TCP net.Listen. BenchmarkWorkerRSS builds the two small servers
// bench/cmd/worker-plain and bench/cmd/worker-zerodrop, loads each, and
// reports their VmRSS.
//
// The library packages have their own: reuseport (BenchmarkAccept), drain
// (BenchmarkAcceptSideBySide, BenchmarkDrainIdle), handoff (BenchmarkHandoff
// of 1, 100 and 1000 listeners), reuseport/steer (BenchmarkAccept, plain vs
// steered group, in its own namespace).
//
// Everything binds 127.0.0.1:0 and stays on loopback; no privilege needed.
package micro
