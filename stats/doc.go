// Package stats gathers what zerodrop knows about restarts, and what the
// kernel counts of them, in one place that depends on no metrics system.
//
// # How it works
//
// A Hub receives drain reports (RecordDrain, from drain.Listener.Stop,
// drain.Listener.Report or drain.Server.Shutdown), handoffs (RecordHandoff,
// or RecordUpgrade with what handoff.Upgrade returned, or RecordUpgrader in a
// process that just obtained its sockets) and the serving generation
// (SetGeneration). DrainHook and HandoffHook feed it automatically from
// drain.Options.OnReport, drain.Server.OnReport and handoff.Config.OnHandoff.
// It keeps running totals per listener name and drain
// method, per handoff outcome, and duration histograms with fixed buckets
// (DurationBuckets).
//
// Snapshot returns those totals together with the kernel counters of the
// calling thread's network namespace (the figures of reuseport.ReadCounters: TcpExt
// TCPMigrateReqSuccess/Failure, ListenOverflows, ListenDrops, and Tcp.OutRsts
// and EstabResets, the only kernel trace of a queue reset while
// net.ipv4.tcp_migrate_req is 0) and that sysctl. A Snapshot marshals to JSON;
// a Hub is also an http.Handler that serves it.
//
// Subscribe streams every record as an Event through a bounded buffer: a slow
// subscriber loses events (Snapshot.DroppedEvents counts them) and never
// blocks the recorder.
//
// ReadGroup sums what the kernel shows of a reuseport group (members, their
// accept queues and backlogs) from reuseport.InspectMembers, which reads
// NETLINK_SOCK_DIAG without scanning /proc.
//
// Package stats/promstats exports all of this to Prometheus; importing stats
// alone never pulls a metrics library in.
//
// # Concurrency
//
// A Hub's zero value is ready to use, and its methods are safe for concurrent
// use. Recording takes a mutex for a few field updates and never waits on a
// subscriber, the kernel or I/O; nothing is logged.
//
// # Kernel requirements
//
// Linux. The counters are namespace-wide: every listener in the namespace
// moves them, not only the ones the Hub heard of. TCPMigrateReq* needs 5.14;
// on older kernels they read 0 and MigrateReq is unknown.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package stats
