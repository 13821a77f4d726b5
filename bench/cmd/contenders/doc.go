// Command contenders restarts HTTP servers many times under the same load,
// one strategy after another in one run, and reports what the load saw: the
// comparative benchmark of issue 7.
//
//	CGO_ENABLED=0 go build -o /tmp/ ./cmd/contenders ./cmd/zdworker ./cmd/zdworker-steer ./cmd/zdworker-tableflip ./cmd/zdworker-quic
//	sudo /tmp/contenders -c 64,256 -restarts 100 -reps 3 -o /tmp/bench-out
//
// The servers run from separate binaries that link only what they need, as a
// real service binary would: cmd/zdworker (package internal/worker) for most,
// cmd/zdworker-steer for zd-steer (the only one linking the eBPF library) and
// cmd/zdworker-tableflip for tableflip, cmd/zdworker-quic for the HTTP/3
// ones (the only one linking quic-go), found beside contenders or named with
// -worker (its companions are used if they sit beside it, named path-steer,
// path-tableflip and path-quic). This binary also links the plotting packages, and
// package init is paid at every process start here (a Go hello-world takes
// 10 ms to fork, exec and exit on this VM, zdworker 15, a zdworker that also
// links the eBPF library 19): it would sit in the accept gap of the
// contenders that stop a process before starting the next, and near every
// other restart. For the same reason every worker is built statically
// (CGO_ENABLED=0, as most Go services ship): a dynamically linked one pays
// the loader at each start too, 3-4 ms more idle on this VM, and moved the
// fd-store restart's p99 ratio from about 1.5 to 1.65 (BENCHMARKS.md). The
// results' header says how each worker binary is linked, and the run warns
// about a dynamic one. Without the worker binaries beside it, contenders runs
// its workers from itself (it can serve too) and says so on stderr.
//
// With -headline DIR the command runs nothing: it reads DIR/MODE/results.json
// and the header of DIR/MODE/results.md for each client kind (new-conn,
// keepalive, pool, tls-new-conn, tls-keepalive, h2load) and prints the
// headline tables of BENCHMARKS.md, one per kind, with the closest peer to
// zerodrop; -into FILE writes them into FILE between its headline markers.
// bench/results/headline/run.sh makes those runs. -resummarize DIR writes the
// summary of a run that was stopped before its end (its time bound) again
// from DIR/runs/*.json.
//
// # How it works
//
// The parent process runs each (repetition, concurrency, contender) in a child
// of its own, re-executed from the same binary in a fresh network and PID
// namespace: lo is brought up, net.ipv4.tcp_migrate_req is set as the
// contender needs, and every process the run starts dies with that child. In
// the child, the contender starts its server on 127.0.0.1:8080, the load
// generator (package internal/load, a new connection per request by default)
// sends requests at the given concurrency, and the contender restarts its
// server -restarts times, -period after each restart has ended, marking
// every moment a listener closes or changes hands; -lead and -tail of steady
// load frame the restarts, then the load stops (requests still in flight
// then are not counted). The child prints its result as JSON; the parent writes, in
// the output directory, one JSON file and one SVG plot per run, and
// results.md and results.json with a table per contender.
//
// With -pool N the load is a sparse keep-alive pool instead (load.Config.Pool),
// the way a reverse proxy's upstream connections look to a server: N clients,
// each on one keep-alive connection of its own, each sending a non-retryable
// POST at random intervals in -pool-interval (default 50ms-500ms), idle in
// between; -c is then ignored. Every error counts as failed, and the clients'
// dials are counted: results.md adds a table of failed requests and
// reconnects per restart ((dials - N) / restarts per repetition). zd-handoff
// passes its connections to its successor (drain.Server.HandOver and
// handoff.Upgrader.HandleConns, as zerodrop.Serve wires them); the other
// contenders cannot, and their clients reconnect.
//
// With -tls every Go worker serves HTTPS (http.Server.ServeTLS, or
// drain.Server.ServeTLS for zerodrop's; HTTP/2 offered by ALPN, net/http's
// default) with a self-signed ECDSA certificate each run child makes for
// 127.0.0.1 (netnstest.WriteCert) and passes to its workers
// (worker.EnvTLSCert, EnvTLSKey), and the load speaks HTTP/1.1 over TLS
// trusting only that certificate, with a session cache its clients share (a
// reconnection offers the last ticket): a new connection per request, or
// kept alive with -keepalive. Each Go worker counts the handshakes it served,
// full and resumed (the server's DidResume), and results.md adds a table of
// them: the share of reconnections that resumed, and full handshakes per
// restart; and of the workers' CPU time (user + system: /proc/PID/stat of
// the run's PID namespace, mounted in the run child, while a worker runs,
// and what it reports at exit, "cpu <pid> <ns>" from getrusage): µs per
// request in the steady phase (from half the lead until the first
// restart), CPU per restart (the phase from the first restart until the
// tail's end, divided by the restarts), and the excess per restart (that
// minus what the phase's requests cost at the steady rate). zd-tickets is zd-handoff whose session-ticket keys go to the
// successor (handoff.Config.TicketKeys, worker.EnvTickets), so that its
// clients resume across restarts. zd-handoff's and zd-tickets's workers then
// hand no TLS connection over: their predecessor drains them. zd-tls13 is
// zd-tickets whose idle TLS 1.3 HTTP/1.1 keep-alive connections go to the
// successor with their session (drain.Server.TLSHandOver, as
// zerodrop.Options.TLSHandoff sets it; worker.EnvTLSHandOver): its clients
// see neither a close nor a handshake with -keepalive; the connections it
// cannot hand over (TLS 1.2, a state not proven) are drained as
// zd-tickets's are; -pool's POSTs are followed through their bodies, so
// its connections go over too. Over TLS, zerodrop's workers (zd-drain, zd-handoff, ...) drain with
// drain.Server.CloseSpread (worker.DefaultCloseSpread, 500 ms; the
// environment variable ZD_BENCH_CLOSE_SPREAD changes it, "0" for none), so
// their keep-alive clients reconnect, each with a full handshake, spread
// over that window rather than all at once; ZD_BENCH_TIMELINE=1 logs when
// each worker's handshakes began and its Connection: close responses went
// out. -h2 loads HTTP/2 over TLS instead (load.Config.HTTP2: net/http's
// Transport speaking HTTP/2 only, -h2-streams workers sharing each
// connection); results.md adds a table of the requests the Transport retried
// (a stream refused, or above a GOAWAY's last stream id, sent again on
// another connection). zd-systemd-pid1 has no TLS mode and is skipped; nginx,
// haproxy and caddy serve the run's certificate themselves (HTTP/2 offered by
// ALPN). results.md names the mode in its header.
//
// With -h2load the HTTP/2 load is h2load's (nghttp2-client, a client nobody
// here wrote) instead of net/http's Transport: h2load never retries a stream
// and ends a connection at its first GOAWAY, so it cannot run across many
// restarts. One h2load run of 500 ms straddles each restart instead, begun
// 200 ms before it (-c c/h2-streams connections, -m h2-streams streams each,
// one thread), and -period separates the end of a run from the next; there
// is no steady load in between, so no latency table. results.md adds a table
// of h2load's counts summed over the runs: streams done, failed (no 2xx
// answer), errored (failed below HTTP: refused, or above a GOAWAY's last
// stream id), timeout, the restarts whose run failed a stream, and the
// streams still in flight when a run's time was up (started - done, counted
// neither way by h2load). Each run's JSON keeps the output of its first
// failing h2load run.
//
// With -h3 the load is HTTP/3 (load.Config.RoundTripper: quic-go's
// http3.Transport, -h2-streams workers sharing each connection, TLS
// implied), and only the contenders that serve HTTP/3 run: zd-h3 (a
// quicdrain generation upgraded by handoff), h3-pass (the control that
// passes the UDP socket and starts quic-go on it in the successor), h3-naive
// (stop, start) and caddy (reloaded; Caddy serves HTTP/3 on the HTTPS
// site's port by default). Without -h3 the HTTP/3-only ones are skipped.
// results.md adds a table of the stateless resets the clients saw, the
// datagrams successors forwarded to their predecessors (per restart), and
// the connections the quicdrain generations told to go away, saw finish and
// forced. Use -post: quic-go's client retries no request anyway, but a POST
// is what the restart must not lose.
//
// With -post every request is a POST of a few bytes that net/http cannot
// replay (load.Config.Post: GetBody nil, the body a plain io.Reader, as one
// streamed from a file is), with -h2 above all: Go's Transport then cannot
// send again a stream a GOAWAY left behind, and the request fails (class
// other, "cannot retry err [...] after Request.Body was written", or
// "cannot rewind body after connection loss" for one that chose its
// connection just before the GOAWAY arrived) where a GET counts as
// retried. With -tls and the plain modes the hand-written client sends the
// same POST; it never retries anyway. The workers read and discard the
// body. Not with -pool, whose clients always POST.
//
// A restart is one replacement: a worker of a SO_REUSEPORT pool rolled (the
// pools have 4 workers, rolled round-robin), a process upgraded or
// restarted, or one nginx reload.
//
// # Contenders
//
// What people do today: naive (stop the process, start a new one that listens
// again), reuseport-m0 and reuseport-m1 (SO_REUSEPORT workers, plain
// http.Server.Shutdown, tcp_migrate_req 0 and 1), tableflip
// (github.com/cloudflare/tableflip upgrading the process), nginx,
// nginx-reuseport and nginx-reuseport-4to2 (Debian's nginx reloaded with
// nginx -s reload; the last alternates worker_processes 4 and 2), haproxy
// (Debian's HAProxy in master-worker mode answering with http-request return,
// reloaded by SIGUSR2 to the master with a stats socket that has expose-fd
// listeners: the seamless reload, the new worker taking the listeners with
// -x; each reload must be answered by a new worker PID) and caddy (Debian's
// Caddy, respond directive, caddy reload through the admin API on a unix
// socket). nginx's and Caddy's reloads are configuration reloads of the same
// binary, not binary upgrades; HAProxy's reload re-executes the binary. The
// peers are skipped, with a message, when their binary is not installed.
//
// zerodrop: see zerodrop.go for the strategies wired in and the ones still
// missing, and internal/worker for their servers. zd-systemd plays systemd's
// part itself (a notify socket and an fd store of its own); zd-systemd-pid1
// runs the same worker under Debian's real systemd, booted as PID 1 of a
// sandbox (internal/sysdbox) that shares the run's network namespace, and
// restarts it with systemctl restart: its figures are systemd's.
//
// # Requirements
//
// Root (or CAP_SYS_ADMIN and CAP_NET_ADMIN) for the namespaces; Linux 5.14+
// for tcp_migrate_req. All traffic stays on the loopback of the namespaces.
package main
