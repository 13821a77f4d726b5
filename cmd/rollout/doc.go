// Command rollout shows, on your own kernel, what restarting a Go HTTP server
// under load costs with each way of doing it, side by side:
//
//	go run ./cmd/rollout                 # as root, or with user namespaces
//	go run ./cmd/rollout --json          # one JSON object
//	go run ./cmd/rollout --metrics       # and each strategy's zerodrop_ metrics
//	go run ./cmd/rollout --duration 20s --concurrency 256 --restarts 27
//
// # What it does
//
// It re-executes itself in a new network and mount namespace (as root;
// otherwise also in a new user namespace that maps your UID to root, which
// gives it CAP_NET_ADMIN over that network namespace only), brings lo up,
// widens net.ipv4.ip_local_port_range there, and then,
// for each strategy in turn: sets net.ipv4.tcp_migrate_req, starts its
// servers (processes of this same program, each answering with its
// generation and pid in X-Generation and X-Pid), sends load from clients that
// open a new connection per request (package internal/load; every failure is
// counted, nothing is retried), restarts the servers --restarts times, evenly
// spread over --duration, and stops everything. On a loaded machine,
// restarts may fall behind their schedule: the load then runs longer, so
// that every restart happens with steady load around it, and the table says
// so. Nothing outside the
// namespace is touched, and every process it starts dies with it (SIGTERM,
// then SIGKILL; Pdeathsig if the runner dies).
//
// # Strategies
//
//   - close: plain SO_REUSEPORT workers (net.ListenConfig with a Control
//     func, Go's defaults otherwise), stopped with http.Server.Shutdown, and
//     tcp_migrate_req=0: what most servers do today. Each stop resets the
//     connections in the worker's accept queue, and Shutdown drops requests
//     it reads after it began (golang/go#65802).
//   - migrate: reuseport.Listen (plain TCP), tcp_migrate_req=1, and
//     drain.Server: the listener stop moves the queue to the siblings, then
//     every accepted connection is served before http.Server.Shutdown.
//   - handoff: one server upgraded in place through package handoff: the
//     successor inherits the listening socket over a unix socket, calls Ready,
//     and only then does the predecessor stop accepting and drain. The socket
//     never closes.
//   - ebpf: reuseport listeners joined to an SK_REUSEPORT program
//     (reuseport/steer), tcp_migrate_req=0: drain.Server marks the stopping
//     worker Draining in the program (no new connection reaches it), accepts
//     until its queue is empty, and closes; the program migrates what is
//     left. Needs root (CAP_BPF): the runner mounts a bpf filesystem in a
//     mount namespace of its own. Skipped, and said so, without root.
//   - cpu: reuseport listeners with SO_INCOMING_CPU (the worker of slot s,
//     and each successor in that slot, on online CPU s modulo the CPUs),
//     tcp_migrate_req=0, and drain.Server with
//     drain.Options.StepOut: the stopping worker clears its CPU, so that
//     (Linux 6.1+) the kernel picks it for no new connection while the others
//     cover every CPU, waits out its handshakes, accepts until its queue is
//     empty, and closes. No privilege and no eBPF. Needs --workers of at
//     least the number of online CPUs; otherwise the stop says why it did not
//     step out and falls back to accepting until empty.
//
// Each restart's successor is started ahead of time (it joins the group, or
// inherits the socket and waits for its turn to call Ready), so that the
// restart itself is the switch: a worker is told to stop (SIGTERM) or a
// handoff successor takes over. That moment is marked on the load's
// timeline, and "p99 restart" covers the requests sent within 200 ms of a
// mark. The next successor starts while the old server drains.
//
// # Reading the result
//
// failed counts requests without a full reply, by class: reset (ECONNRESET:
// typically a queue reset), refused, eof (the connection closed before a
// reply: typically Shutdown's dropped request), timeout. queue lost adds up
// the drain reports' remainders; kernel RSTs is Tcp.OutRsts over the run,
// the only counter that moves when a queue is reset with migration off.
//
// The --json object has a strategies array whose items hold name, restarts,
// requests, failed, failed_by_class, queue_lost, p99_ms_steady,
// p99_ms_restart, the kernel counter deltas, and each stop's report.
//
// With --metrics the workers serve /metrics (package stats/promstats: their
// generation, the reuseport group, the namespace's kernel counters), and
// after each strategy's last restart the runner scrapes one server (the one
// the group picks for a new connection): the table is followed by its
// zerodrop_ samples, and --json items get them as a metrics object (sample
// name with labels to value).
//
// # Requirements
//
// Linux 5.14 or later (tcp_migrate_req), and root or unprivileged user
// namespaces (then without the ebpf strategy). About 40 s with the defaults.
package main
