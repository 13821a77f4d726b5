// Command workers runs N HTTP worker processes in one SO_REUSEPORT group under
// a supervisor that restarts them one at a time on SIGHUP, without losing a
// connection.
//
// # How to run it
//
// As root (Enable writes net.ipv4.tcp_migrate_req=1 in your network namespace;
// with the sysctl already 1, any user can drop the flag):
//
//	sudo go run ./examples/workers -addr 127.0.0.1:8080 -workers 4 -migration enable
//
// In another terminal:
//
//	while true; do curl -s http://127.0.0.1:8080/; done   # "generation 1 worker 2 pid 4242"
//	curl -s http://127.0.0.1:8080/ready                   # "ok" (503 from a worker that drains)
//	curl -s http://127.0.0.1:8080/metrics                 # generation, group, kernel counters (stats/promstats)
//	sudo kill -HUP $(pgrep -o workers)                    # the supervisor: rolling restart, generation 2
//	sudo go run ./cmd/zerodrop doctor --port 8080         # the group, its queues, the sysctl
//
// Ctrl-C (SIGINT) or SIGTERM stops every worker gracefully and exits.
//
// # How it works
//
// The supervisor re-executes its own binary once per worker (the worker's
// settings travel in ZERODROP_WORKER_* variables). Each worker opens its own
// listener with reuseport.Config.Listen, so the kernel spreads new connections
// over the group, and tells the supervisor it is listening by closing a pipe.
// On SIGHUP the supervisor starts a worker of the next generation, waits until
// it listens, then sends SIGTERM to the worker it replaces, and waits for it
// to exit before the next one: the group never shrinks.
//
// A worker stops with drain.Server, in the order that loses nothing
// (KERNEL.md, "What Go's net/http does at shutdown"): its listener stops first,
// so the kernel migrates the connections still in its accept queue to a
// sibling (tcp_migrate_req=1); then every connection it had accepted gets its
// request answered; only then does http.Server.Shutdown run. Shutdown alone
// would drop the request of a connection accepted just before it
// (golang/go#65802). The drain's report (queued, migrated, accepted, reset) is
// logged when the worker stops.
package main
