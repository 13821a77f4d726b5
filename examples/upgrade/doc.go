// Command upgrade is an HTTP server that upgrades its own binary on SIGHUP
// without losing a connection: the new process inherits the listening socket
// through package handoff, and the old one drains with drain.Server and exits.
//
// # How to run it
//
//	go build -o /tmp/upgrade ./examples/upgrade
//	/tmp/upgrade -addr 127.0.0.1:8080 &
//
// In another terminal:
//
//	while true; do curl -s http://127.0.0.1:8080/; done  # "generation 1 pid 4242"
//	curl -si http://127.0.0.1:8080/ | grep X-Generation  # the generation, as a header
//	curl -s http://127.0.0.1:8080/ready                   # 200 "ok"; 503 while draining
//	curl -s http://127.0.0.1:8080/metrics                 # zerodrop_generation, drains, handoffs, kernel counters
//	go build -o /tmp/upgrade ./examples/upgrade           # a new binary (optional)
//	kill -HUP $(cat /tmp/zerodrop-upgrade-$(id -u)/upgrade.pid)  # generation 2
//
// or, to know when the new generation serves (and why not, if it does not):
//
//	go run ./cmd/zerodrop upgrade --socket /tmp/zerodrop-upgrade-$(id -u)/handoff.sock \
//	    --pid $(cat /tmp/zerodrop-upgrade-$(id -u)/upgrade.pid) --signal HUP
//
// SIGINT or SIGTERM drains and exits (the socket closes with the last
// generation): /ready answers 503 at once, requests are still served for
// -delay (so load balancers notice), then the listener stops without losing
// its queue, every accepted request is answered, and what is left after
// -grace is closed. examples/kubernetes runs it as a Deployment.
//
// # How it works
//
// On SIGHUP the server starts a new process: -exec, or by default its own
// executable path again (so a binary replaced on disk is what runs), with the
// same arguments. The new process calls handoff.New, which connects to the
// old one over the handoff socket (-socket) and receives the listening socket
// (SCM_RIGHTS); both now accept from the same kernel queue. Once it serves, it
// calls Ready: the old process's Exit channel closes, and it drains with
// drain.Server (readiness 503, its listener released, every accepted request
// answered, then http.Server.Shutdown) and exits. The socket never closes, so
// nothing queued in it is reset. Each response carries X-Generation (1 for the
// first process, +1 per upgrade) and X-PID. A failed successor (it dies, or
// never calls Ready) leaves the old generation serving; handoff counts the
// failure, which "zerodrop upgrade" reports.
package main
