// Package drain stops a TCP listener without losing its accept queue, and
// drains an http.Server without losing a request, with a report that accounts
// for every queued connection.
//
// This comment is longer than a screen on purpose: each section below is
// what a stop does to connections a caller cannot see (queued, idle,
// mid-request, mid-handshake, hijacked) and the kernel facts it rests on; no
// one function's comment can hold them. The API itself fits one screen: go
// doc -short github.com/zerodrop/zerodrop/drain.
//
// # How a listener stops
//
// Wrap takes a *net.TCPListener or a *reuseport.Listener. Its Close (which
// http.Server.Shutdown calls) or Stop reads the accept queue (TCP_INFO), looks
// at the reuseport group and the processes holding the socket (sock_diag and
// /proc, as reuseport.Inspect does), and picks one method:
//
//   - MethodRelease: the socket is shared, another process holds it, or
//     nothing proves that none does (see Ownership). We close our fd; the
//     socket and its queue live on in the other holders. Report.StillListening
//     says whether it did; if it stopped at our close, nobody else held it,
//     and its queued connections are counted as the remainder.
//   - MethodMigrate: the group has siblings and net.ipv4.tcp_migrate_req=1.
//     shutdown(SHUT_RDWR) on the listening fd moves the queue to the siblings
//     inside the call (TcpExt.TCPMigrateReqSuccess counts them); then close.
//   - MethodAccept: otherwise. We accept until the queue is empty, re-read its
//     depth right before close and accept again if it grew, then close. The
//     connections accepted are handed to Accept, so the server serves them.
//   - MethodStepOut: Options.StepOut, a socket we may shut down (as for
//     MethodMigrate and MethodAccept), and the other members of the group
//     cover every online CPU with SO_INCOMING_CPU (reuseport.ListenPerCPU,
//     or one CPU per worker of a pool; Linux 6.1+). We clear our
//     SO_INCOMING_CPU, so the kernel picks us for no new SYN, wait for an RCU
//     grace period (membarrier) and then until every handshake that was in
//     flight on the port has ended (sock_diag cannot tell whose a request
//     socket is: the port's are a superset of ours, and no later one is
//     ours), accept until the queue is empty, and shut down. Nothing can
//     reach the queue by then: lossless with tcp_migrate_req 0 or 1, no
//     privilege, no eBPF. It is refused with a Steerer (ErrSteered: the
//     program replaces the pick), before Linux 6.1
//     (reuseport.ErrNoCPUPreference) or when a CPU would be left uncovered
//     (a *reuseport.UncoveredError; members of another user's processes
//     count as unknown): Report.StepOutRefused says why, and the stop uses
//     the method above. Members unknown only because their listed holders
//     exited or let go of them while the group was read (a handoff's
//     predecessor exiting) are gone or held by another process a moment
//     later: the group is read again first, a few times within a few
//     milliseconds (Report.StepOutRereads counts them). The check follows the change, which is undone if it
//     fails, and stops of this process step out one at a time. A sibling that
//     closes while we drain can uncover a CPU again (its SYNs then go to any
//     member the hash finds first, us included): roll one member at a time,
//     starting its successor first. A program
//     attached to the group by someone else is not detected (no getsockopt
//     reads it). Report.HandshakesLeft counts handshakes still in flight
//     when ctx ended the wait (those that were ours are lost with the
//     sysctl off).
//
// After the stop, Accept returns the connections the drain accepted, then an
// error wrapping net.ErrClosed (never the EINVAL the kernel gives after
// SHUT_RDWR). While serving, Accept is the wrapped listener's Accept.
//
// What remains lossy, and the Report says so: with MethodAccept, a connection
// that completes its handshake between the last empty check and close, and
// handshakes still in progress at close, are reset by the kernel; a sibling
// with migration off keeps receiving its share of new connections until close.
// With MethodMigrate, a handshake that completes on another CPU while the stop
// runs can still be reset: the kernel saw the listener listening when the
// client's ACK arrived, and finds it stopped when it queues the new
// connection, so it neither migrates nor counts TCPMigrateReqFailure; only
// Tcp.OutRsts and Tcp.EstabResets show it (Report.OutRsts too when the reset
// goes out before the stop reads the counters again). Rare: TestStopRace in
// reuseport/steer, which rolls a member every 2 ms under 16 connecting
// clients, meets it a few times in 400 rolls; the restart benchmark
// (bench/cmd/contenders, zd-drain) met it 3 times in 2,400 rolls. A Steerer (an
// eBPF program, package reuseport/steer) closes the window: the member gets
// no new connection before it stops.
//
// Every stop of a socket no other process holds is shutdown(SHUT_RDWR), then
// close(), never close() alone: close() marks a listener shut down before it
// stops listening, and a connection whose handshake completes in between
// inherits the mark, is migrated, and reaches a sibling's Accept already
// closed (its client reads EOF). The holder scan compares the PIDs /proc
// shows with the PID /proc gives us (not os.Getpid(), which differs in a PID
// namespace that kept its parent's /proc).
//
// # Ownership
//
// shutdown() stops a socket listening in every process that holds it, so
// the stop never chooses it for a socket that is known to be shared, and
// chooses it only when the holder scan proves we are the last holder. A
// socket is known to be shared when package handoff handed it to a successor
// or received it from a predecessor, or got it from systemd (socket
// activation or the fd store): handoff records that itself (the fact does not
// come from /proc), and Report.Shared says which. Options.Shared marks any
// other listener shared, for example one a supervisor passed us and keeps.
// A socket handed to a successor, held by systemd or marked by the option is
// shared for good. A socket received from a predecessor stops counting as
// shared only when a scan that read the fds of every process /proc shows
// (old or young, in our tree or not) finds no other holder: the predecessor,
// or a process it passed the socket to, can be any process, and one we
// cannot read (not dumpable, as every setcap binary is; another UID) can
// never prove it let go. Until then the stop accepts what is queued, then
// releases the socket. A successor whose Ready failed (its predecessor still
// serves) thus never stops the socket under its predecessor.
//
// Which decisions rest on the holder scan, and why each fails safe:
//   - shutdown() of an unmarked socket: only when the scan is complete for
//     inherited holders (below); an incomplete one releases instead.
//   - shutdown() of a socket received from a predecessor: only when the scan
//     read every process; an unreadable one releases instead.
//   - Report.OtherHolders, Report.Unreadable and Report.StillListening are
//     what it saw; a process it saw hold the socket always means release.
//
// A release that was not needed (we were the last holder) costs what close()
// costs: what arrives between the last accept and the close may be reset (or
// migrated by close() with siblings and tcp_migrate_req=1); a shutdown that
// was not safe would stop the service in every other holder. So every
// uncertainty chooses release.
//
// Otherwise the scan decides, and it must be complete. A socket reaches
// another process in two ways: sent over a unix socket, which handoff and
// systemd mark and your own code must mark with Options.Shared, or inherited
// at fork, down the process tree. So the processes that could hold our socket
// unseen are those whose fds we cannot read (another UID, a non-dumpable
// process, hidepid=1) that started no earlier than us and descend from our
// parent (our children, our siblings, theirs; everything when our parent is
// PID 1). Such a process, a /proc that shows only a PID namespace or hides
// processes (hidepid=2), a failed scan, or a scan that does not see us
// holding the socket make the stop careful: it accepts what is queued (which
// loses nothing whoever else holds the socket), then releases the socket
// instead of shutting it down, says why in Report.Why, lists the PIDs in
// Report.Unreadable, and logs drain.unsure. If we were the last holder after
// all, the close stops the socket with an empty queue, as MethodAccept would;
// with reuseport siblings and tcp_migrate_req=1, what arrives in between is
// migrated by close(), which has the handshake race shutdown() avoids (see
// MethodMigrate), so such a stop can reset a connection that MethodMigrate
// would not. Report.StillListening says which it was.
//
// # The report
//
// Report counts the connections queued at the stop, migrated (counter delta),
// accepted by us, left to other holders, and the remainder the kernel may have
// reset; the method and why; and durations. Counters are namespace-wide, so
// Estimated is set when other listeners could have moved them too.
//
// # HTTP
//
// http.Server.Shutdown drops every request it reads after it began
// (golang/go#65802): a connection accepted a moment before, whose request was
// not read yet, gets no reply. Server runs the phases in the order that loses
// nothing: readiness fails (Ready answers 503), an optional Delay, the
// lossless listener stop, Connection: close on every later response and idle
// keep-alive connections given IdleGrace to send one more request (answered
// with Connection: close, after which they close, so a client that sends
// does not race the close; those still idle then are closed and counted in
// HTTPReport.IdleClosed, since a client may have been sending just then; a
// response still in flight that says keep-alive, its handler begun before,
// is waited for, and its connection gets IdleGrace once idle), a
// callback for hijacked connections, serving every accepted connection's
// pending request, and only then http.Server.Shutdown. At the deadline, what
// is left is closed and named in
// the report.
//
// Telling every keep-alive client Connection: close at once makes them all
// reconnect, to the successor or the siblings, in the same few milliseconds;
// over TLS each reconnection is a full handshake, and the burst costs
// latency (see bench/results/HISTORY.md). Server.CloseSpread spreads it, as HAProxy's
// close-spread-time does: once the listener has stopped, the connection i of
// the n open is served as before until i*CloseSpread/n, then told to close
// (IdleGrace from then if it is idle) or, over HTTP/2, to go away. The drain
// lasts up to CloseSpread longer; a ctx deadline compresses the window.
//
// # Keep-alive connections handed over
//
// Closing an idle keep-alive connection races its client: a request sent as
// the close arrives fails, and a POST cannot be retried safely. IdleGrace
// narrows that window; only handing the connection to the process that
// serves next closes it. With Server.HandOver set (zerodrop.Serve sets it at
// a handoff, passing the connections with handoff.Upgrader.PassConns), Serve
// wraps every accepted connection so that it can be taken from net/http,
// and Shutdown, once the listener has stopped, takes each plain HTTP/1.1
// connection as soon as net/http waits for its next request: a connection
// that has sent nothing yet, an idle one at once, a busy one after its
// response (Connection: close is not set while handing over), until
// HandOverGrace. net/http is taken only where its buffer is provably empty
// (see detach.go: the Read it makes between two requests, with nothing
// buffered); bytes that arrive during the take travel with the connection
// (Detached.Unread), so a request that arrives meanwhile is served exactly
// once, by one of the two processes. Connections are taken and offered
// HandOverBatch (16) at a time: a request that arrives on a connection once
// it is taken waits until the successor serves it, so each waits for one
// small batch while the others are still served here. The successor serves
// the connection with ServeConn, as if accepted, and can hand it over again.
// HTTP/2 connections are never handed over (their state lives in
// net/http), nor TLS ones unless Server.TLSHandOver: then ServeTLS records
// each connection's TLS 1.3 record layer (package tlsresume), and an idle
// HTTP/1.1 one whose state is proven exactly goes over with its session
// (Detached.Unread is its marshalled tlsresume.State, which ServeConn
// recognises and continues with a tlsresume.Conn, setting r.TLS for
// handlers); HTTPReport.HandedOverTLS counts them and TLSNotHandedOver those
// refused (TLS 1.2, client certificates, ChaCha20-Poly1305 without
// tlsresume/chacha imported, state not proven). The others get
// IdleGrace as before, counted in HTTPReport.IdleClosedTLS when closed
// idle. A passed connection waits for
// its next request in the successor as net/http waits for a new
// connection's first one: at most ReadHeaderTimeout, not IdleTimeout.
//
// # TLS and HTTP/2
//
// ServeTLS serves HTTPS like http.Server.ServeTLS (HTTP.TLSConfig honoured,
// h2 offered by ALPN). The TLS handshake runs in net/http's connection
// goroutine, after Accept, so a connection accepted before the stop whose
// handshake or first request comes later is the same trap as golang/go#65802,
// and the drain treats it like a plain connection still to send its request:
// served if it arrives within NewConnGrace. But a handshake whose ClientHello
// the server has read is the server's to answer, and a slow server (a busy
// CPU, a slow GetCertificate) is no silent client: such a connection waits
// until the server has answered its ClientHello (bounded by the drain's
// context), and its NewConnGrace runs from then. ServeTLS learns both
// moments from the connections its listener hands crypto/tls: their first
// read and the server's first write. HTTPReport.TLSPending counts the
// TLS connections still without a request when the listener stopped and
// TLSPendingServed those then served.
//
// An HTTP/2 connection (ALPN h2, or h2c when HTTP.Protocols enables it) is
// never closed as an idle one is: that would cut a stream its client opened
// meanwhile. It is told to go away in RFC 9113's two steps (section 6.8):
// once the listener has stopped (so that the connection the client opens
// next cannot reach this server again), the drain writes a GOAWAY with the
// largest stream id, 2^31-1, and a PING; the client stops opening streams;
// the PING's ack shows it
// has seen the GOAWAY and that every stream it opened before is read. The
// drain counts the first step over once the client has then opened no
// stream for 50 ms (at most 250 ms after the ack), and net/http sends its
// own GOAWAY only at http.Server.Shutdown, once no stream is in flight and
// each HTTP/2 connection has been closed by its client or idle for
// NewConnGrace (responses on HTTP/2 never say Connection: close, which
// would make net/http name the last stream at once): Go's http.Transport can still
// write one stream that took its id before it read the first GOAWAY, and
// on a loaded machine that can be 100 ms or more after its ack. A client
// told to go away closes its connection itself once its streams are done
// (Go's does, unless a request it had queued on it failed at the GOAWAY:
// the drain then closes it once net/http's GOAWAY is written and the
// client's TCP has acknowledged every byte, HTTPReport.GoAwayClosed, where
// net/http would wait 1 s). Net/http's GOAWAY names a last stream that covers them all;
// streams in flight finish. net/http alone sends just the second, so a
// stream the client opened while that GOAWAY was on its way was above it and
// ignored (a client that retries, such as Go's http.Transport, sent it
// again; h2load and a POST without GetBody lose it). The acks are awaited
// for at most NewConnGrace; HTTPReport.HTTP2 counts the HTTP/2 connections,
// GoAwayAcked and GoAwayUnacked how their first step ended.
//
// net/http has no API for this, but it serves HTTP/2 through
// http.Server.TLSNextProto, and its "unencrypted_http2" entry serves any
// net.Conn whose preface has been read. The drain sets itself in that path
// when its Serve or ServeTLS first hands it a connection: for ALPN h2 it
// reads the 24-byte preface from the *tls.Conn (within 10 s, as net/http
// would) and gives net/http a connection that follows the frames both ways
// and reports the TLS state (Request.TLS and net/http's own TLS checks are
// unchanged); for h2c it wraps the connection net/http passes. Hooks
// (ConnState, ConnContext) still see the connection net/http accepted. A
// server whose TLSNextProto lacks these entries (HTTP/2 turned off, or a map
// of the user's own) keeps net/http's single GOAWAY.
//
// A client that reads a GOAWAY while it still has streams queued to send
// refuses them itself (nghttp2 does, and h2load counts them as failed), and
// a client keeping streams busy queues one as each response ends. Go's
// http.Transport fails such a request unsent: one that has chosen the
// connection (reserved a stream on it) but not yet given its stream an id
// when its reader handles the GOAWAY; a request whose body has no GetBody
// then fails with "net/http: cannot rewind body after connection loss"
// (golang/go#62450), a GET is sent again. So before the first step the drain
// sends a PING alone, a probe, and holds net/http's frames: the ack shows
// the client has read every response written before. It then probes again,
// frames still held, until the client has opened no stream for 20 ms and
// during a whole probe's round trip (at most 250 ms in all): with no
// response reaching it, nothing wakes a new request on the connection, and
// those the earlier responses woke have opened their streams. No response
// ends while the GOAWAY is on its way. A client starved of CPU answers the
// probes as slowly, so the wait follows its starvation; a request whose own
// goroutine the client does not run for longer still fails
// (TestHTTP2PostsAcrossHandoffs, 100 handoffs on 2 cores: 1, 0 and 0 at
// load average 23, 46 and 20, against 11 and 14 with a single probe at 23
// and 36; the one had chosen its connection 59 ms before the GOAWAY was
// written). The probes cost each
// HTTP/2 connection, at the stop, 20 ms and a few round trips of held writes.
//
// # Resets
//
// A TCP connection closed while bytes wait unread in its receive queue, or
// that receives bytes after its close, is reset by its kernel (RFC 9293
// section 3.6), and a reset can make its peer discard data it has not read.
// A server's close races its client's last bytes on every TLS and HTTP/2
// connection: a PING's ack, a WINDOW_UPDATE, the client's close_notify in
// answer to the server's. The drain closes its TLS connections (whoever
// closes them: net/http, the drain, a hijacker) and its h2c connections as
// nginx's lingering_close does: it shuts the write side, reads and
// discards until the client closes or 500 ms have passed, then closes; the
// Close call returns at once, and Shutdown waits for the lingering closes
// (bounded by its ctx). TestHandoffServerResets counts no reset over 10
// handoffs, HTTP/2 and HTTP/1.1 (3 and 181 before). Plain HTTP/1.1
// connections are net/http's own and are closed as it closes them.
//
// Most resets seen around a restart are the clients' own, which no server
// can prevent: a capture on the loopback of 5 handoffs with Go's HTTP/2
// client (8 Transports) counted 372 resets, every one sent by a client.
// 333 were spare connections: when its connection goes away, Go's
// http.Transport dials one connection per waiting request (over TLS it
// learns that the server speaks HTTP/2 only once a handshake is done),
// keeps one and closes the others at once; the 39 others were connections
// the client closed once its streams had ended after the GOAWAY. Both
// times the client wrote its close_notify and closed its socket without
// waiting for the server's, which then arrives at a closed socket (curl
// does the same: about one reset per connection, HTTP/1.1 or HTTP/2). So
// Tcp.EstabResets about equal to the clients' dials is the clients'
// closing, not the server's.
//
// # WebSockets
//
// A hijacked connection (a WebSocket) is its handler's: net/http's Shutdown
// does not wait for it. GoingAway is a ready-made Hijacked callback that
// sends the close frame 1001 "going away" and gives the connection a
// deadline (examples/websocket shows it with gorilla/websocket, through a
// handoff: zerodrop.Options.Drain).
//
// The drain runs once. Shutdown may be called from several goroutines: the
// others wait for it, each bounded by its own ctx, and every caller gets a
// copy of the report of its own (changing one changes no other, nor the
// served Listener's). A nil listener (ErrNilListener) or a Server without
// HTTP (ErrNoHTTPServer) is an error, never a panic.
//
// The package never installs signal handlers or exits; see the examples for
// the signal wiring.
//
// # Taking an idle connection from net/http
//
// Server.HandOver passes keep-alive connections to a successor (package
// handoff) or a sibling instead of closing them; zerodrop.Serve sets it. It
// stands on a connection wrapper from which an idle HTTP/1.1 connection can
// be taken without losing or duplicating a byte. It is taken
// only while net/http waits for the first byte of the next request with
// nothing buffered, which the wrapper proves from net/http's calls between
// two requests (StateIdle, one SetReadDeadline, then a Read with the whole
// bufio buffer, the length of the connection's first Read, before any byte
// was returned). The take marks the connection under a lock, then wakes that
// Read with a past deadline; bytes the Read brings back are kept as the
// connection's unconsumed bytes, never given to net/http; bytes that came
// before the mark were given to net/http, and the take is refused. net/http
// then closes only the wrapper; the socket stays open for the taker, who
// serves it elsewhere with the unconsumed bytes replayed first. So every byte
// is read by exactly one of net/http, the unconsumed bytes, or the socket's
// receive queue. Pipelined bytes buffered by net/http make a connection
// untakeable until it is idle with nothing buffered. The argument in full is
// in detach.go; TestDetachExactlyOnce pins net/http's order of calls (Go 1.21
// to 1.26), so a change there fails the test rather than a client.
//
// # Kernel requirements
//
// Linux. Migration needs 5.14 (net.ipv4.tcp_migrate_req), the step-out 6.1
// (and pidfd_getfd, 5.6, to read the siblings' CPUs); the other methods
// work on any kernel with sock_diag (3.3). Seeing which processes hold a socket
// needs the same UID or CAP_SYS_PTRACE; without it the drain releases the
// socket (see Ownership). MPTCP listeners
// (Go's default for net.Listen since 1.24) are refused: use
// net.ListenConfig.SetMultipathTCP(false) or reuseport.Listen.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package drain
