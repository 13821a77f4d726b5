// Package netnstest is zerodrop's kernel test harness.
//
// # Namespaces
//
// Run re-executes the test binary for one test in a fresh network namespace
// (clone with CLONE_NEWNET, so every thread and every child process of the test
// lives there), brings up lo and sets net.ipv4.tcp_migrate_req. The parent waits
// for the child and reports its verdict; a child that did not run the body is a
// failure, never a silent pass.
//
// # Privilege
//
// Tests that need root call RequirePrivileged (Run does it for them). For a
// non-root user they skip with the reason; with ZERODROP_REQUIRE_PRIVILEGED=1
// (set by .ci/run) they fail instead, so CI proves they ran.
//
// # Experiments
//
// Queue connects clients that send bytes and then wait for an answer, and
// classifies each outcome (answered, reset, EOF, refused, timeout). Counters takes
// TcpExt/Tcp snapshots and gives deltas. CheckLeaks compares the process's fd and
// goroutine counts before and after a test. Helper processes are re-executions of
// the test binary (see RegisterHelper and StartHelper), ended by the test.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package netnstest
