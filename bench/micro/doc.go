// Package micro holds the micro-benchmarks of issue 7 that no library
// package owns; it has no code outside its tests.
//
//	go test -run '^$' -bench . -benchtime 1000x ./micro/
//
// BenchmarkAcceptKinds accepts from every kind of listener side by side
// (net.Listen plain TCP, the reference; net.Listen with Go's default MPTCP;
// reuseport.Listen; drain.Wrap; a fresh handoff listener; a handoff listener
// inherited from a predecessor Upgrader in this process) and reports each
// kind's time per Accept and its throughput relative to the reference. A
// systemd-activated listener is built like the inherited one (net.FileListener
// of the passed fd) and is not measured apart.
//
// The design (design_test.go): b.N rounds; in each, the kinds take random
// places in a Williams square (every kind in every place, and right after
// every other kind, equally often), the connections are dialled in the order
// they will be accepted, single Accepts are timed, and each kind's round gives
// the mean of its fastest 90%. A kind's figure is the median over rounds of its
// per-round ratio to the reference; the log adds a 95% bootstrap confidence
// interval, the interquartile range of the per-round ratios, the ratio of plain
// totals and the load average. Give it a count of rounds, as above.
//
// BenchmarkAcceptNull runs the same design over five identical plain-TCP
// listeners, each of which should read 1.00 +- 0.01 of the first; the test
// TestAcceptNull checks that, sampling until its confidence intervals are
// narrow, in a network namespace of its own. BenchmarkWorkerRSS builds the two
// small servers bench/cmd/worker-plain and bench/cmd/worker-zerodrop, loads
// each, and reports their VmRSS.
//
// The library packages have their own: reuseport (BenchmarkAccept), drain
// (BenchmarkAcceptSideBySide, BenchmarkDrainIdle), handoff (BenchmarkHandoff
// of 1, 100 and 1000 listeners), reuseport/steer (BenchmarkAccept, plain vs
// steered group, in its own namespace).
//
// Everything binds 127.0.0.1:0 and stays on loopback. The benchmarks need no
// privilege; TestAcceptNull needs root for its namespace.
package micro
