// Package quicdrain restarts a QUIC server (HTTP/3 with quic-go) without
// losing a connection, and without privilege: no capability, no eBPF, no
// daemon.
//
// This comment is longer than a screen: the mechanism (who reads the
// socket, what crosses to whom, what a crash leaves) and its limits (kernel,
// quic-go's client) are the contract, and no one function's comment can
// hold them. The API itself fits one screen: go doc -short
// github.com/zerodrop/zerodrop/quicdrain.
//
// A QUIC connection is not a socket: every connection of a server shares one
// UDP socket, and only the connection ID in each datagram ties it to its
// connection. Handing the UDP socket to a successor, as package handoff does
// for any socket, gives the successor datagrams of connections it does not
// know: quic-go drops them, or, with a stateless reset key, kills them with
// a stateless reset (RFC 9000 section 10.3). This package routes each
// datagram to the generation that owns its connection.
//
// # How it works
//
// Every generation holds the same UDP socket (Listen obtains it through a
// handoff.Upgrader) and runs a quic.Transport over a net.PacketConn of its
// own (Gen.Transport): ReadFrom returns the datagrams routed to this
// generation, WriteTo writes on the shared socket, so a generation always
// answers its clients directly.
//
// The connection IDs a generation issues (quic.Transport's
// ConnectionIDGenerator) are CIDLen bytes: the generation's low byte, 13
// random bytes, and a 2-byte tag (AES under a key shared by the lineage:
// the first generation draws it, each predecessor hands it to its
// successor). Only the newest generation reads the socket. For each
// datagram it reads:
//
//   - a short header packet, or a long header packet other than Initial and
//     0-RTT (Handshake), goes to the generation its connection ID names; an
//     ID without a valid tag is dropped (counted in Stats.Unknown), never
//     answered;
//   - an Initial or 0-RTT packet, whose destination ID the client may have
//     chosen, goes to the generation recorded for that ID in the table of
//     handshakes under way (client-chosen IDs, kept Config.HandshakeTTL),
//     else to the generation an ID of ours names, else to the reader, which
//     records it: a new connection.
//
// A datagram of an older generation is forwarded to it over a unix datagram
// socket (Config.Dir/<Name>.<generation>.sock, mode 0600) through a bounded
// queue per destination (Config.Queue; full: dropped, Stats.DropFull). The
// older generation gives it to its Transport, which answers on its own copy
// of the socket.
//
// At a restart (Start in the successor after handoff's Ready, Handover in
// the predecessor on handoff's Exit, or Shutdown for HTTP/3): the
// predecessor stops reading (a read deadline in the past ends the read under
// way), then sends the successor the lineage key and its table; the
// successor reads only once it has them. Meanwhile datagrams wait in the
// socket's receive queue. So the second datagram of a ClientHello (Go's
// default key share, X25519MLKEM768, does not fit one datagram) reaches the
// generation that read the first, whichever side of the switch it falls on.
//
// No generation sets quic.Transport's StatelessResetKey: a datagram a
// generation cannot place may be another generation's, and a stateless reset
// would kill that connection. The price: a client of a generation that died
// learns it only from its idle timeout.
//
// # HTTP/3
//
// HTTP3.Shutdown, for a generation serving an http3.Server (ServeHTTP3),
// hands over (without a successor, at SIGTERM, it goes on reading the
// socket: Handover returns ErrNoSuccessor), waits until no handshake is under way (quic-go's ConnContext
// counts each connection it creates until it is accepted or ends) and no
// Initial or Handshake datagram came for HandshakeQuiet, then calls the server's
// Shutdown: quic-go sends each connection a GOAWAY, answers the requests
// already sent, rejects later ones with H3_REQUEST_REJECTED (quic-go's client
// retries those on a new connection, which the successor serves), and
// returns once every client has closed its connection, or when ctx ends (the
// grace), after which the connections left are closed. Then it closes the
// generation: forwarding to it stops (later datagrams count in DropGone).
// Each connection is served by an http3.Server of its own and gets its
// GOAWAY with a request in flight (held GoAwayLead, so that the GOAWAY
// arrives first), or once idle (IdleQuiet; a connection that carried no
// request yet, NewConnQuiet before the grace ends, since its client is
// most likely about to send its first): quic-go's client closes a
// connection whose GOAWAY finds no request in flight, and a request it is
// opening at that moment (it has its stream, and is not yet counted in
// flight) fails with H3_NO_ERROR (local) instead of being retried. The
// server never processes that request, and no server can close that
// window; the GOAWAY with a request in flight makes it rare, and a longer
// hold does not help (250 ms did no better than 20: the starved client
// read the GOAWAY after the response that came later). Up to v0.60 the
// client checked for a GOAWAY under the lock its control stream's
// goroutine takes to record one; from v0.61 it checks without it. Beside a
// CPU hog, with the race detector, the restart test (10 restarts, about
// 12,000 requests a run) lost a request so in 8 of 17 runs with v0.59.1,
// and in 0 of 16 with v0.65.0, which this module requires (BENCHMARKS.md).
// The window is still in v0.65.0's code
// (between the check and the tracking of the stream); the fix is to track
// the stream before checking. A program of yours that is a quic-go client
// may retry a request that failed with an *http3.Error whose ErrorCode is
// H3_NO_ERROR and Remote false: quic-go's client closed its own
// connection under it, and its stream was one the server's GOAWAY had
// already refused, so it was never processed.
//
//	u, _ := handoff.New(ctx, handoff.Config{Path: sock})
//	g, _ := quicdrain.Listen(ctx, u, "h3", "udp", ":443", quicdrain.Config{Dir: dir})
//	srv := &http3.Server{Handler: h, TLSConfig: http3.ConfigureTLSConfig(tlsConf)}
//	h3, _ := quicdrain.ServeHTTP3(g, srv)
//	u.Ready()
//	g.Start(ctx)
//	<-u.Exit()
//	gctx, cancel := context.WithTimeout(ctx, grace)
//	rep := h3.Shutdown(gctx)
//
// Serve runs a whole service: srv over TCP (HTTP/1 and HTTP/2, drained by
// package drain) and over UDP on the same port number (HTTP/3, as above),
// its TCP responses advertising HTTP/3 with an Alt-Svc header; the TCP
// listeners come from zerodrop.Open and the UDP socket from the same
// handoff, so one SIGHUP restarts both.
//
// # Limits
//
//   - A generation that dies (crash, SIGKILL) with connections left loses
//     them: nobody holds their keys. The newest generation drops their
//     datagrams (Stats.DropGone) and sends no stateless reset, so their
//     clients notice at their idle timeout and reconnect, to the newest.
//     Its handshakes under way fail the same way.
//   - A successor that gets no handover within Config.HandoverTimeout (the
//     predecessor died, hangs, or is not built on this package) reads the
//     socket with a key of its own: the predecessor's connections, if it
//     still lives, are lost as above.
//   - The generation byte wraps at 256: generations alive at once must span
//     fewer than 256 numbers (they span 2 or 3 in practice).
//   - Forwarding costs a unix datagram per datagram (see BENCHMARKS.md); it
//     lasts as long as the predecessor's connections (the GOAWAY grace).
//   - quic-go must not resize the socket's buffers (the handoff refuses a
//     socket whose options changed since they were declared): the Transport's
//     conn ignores SetReadBuffer and SetWriteBuffer; size them in
//     handoff.Config.Listen (reuseport.Options.RecvBuffer; quic-go advises
//     7 MB). With the kernel's default (208 KiB), 200 clients overflow it
//     at a restart: QUIC resends what was dropped, except a client's
//     CONNECTION_CLOSE, whose connection the old generation then keeps
//     until its idle timeout (past the grace: forced).
//   - Under heavy load, a successor may wait longer than
//     Config.HandoverTimeout (2 s) for its predecessor to stop reading; it
//     then drops the predecessor's datagrams as unknown (Stats.Unknown,
//     HandoverTimeouts): raise it where the machine is overcommitted.
//   - Connection IDs the client chose are routed by the table only: a
//     client's Initial retransmitted after Config.HandshakeTTL goes to the
//     newest generation.
//
// # Security
//
// Config.Dir must be writable by us only: any process that can write to a
// forwarding socket can inject datagrams with any source address. A
// handover is taken only from the predecessor's socket path. The tag makes
// a forged generation byte pass once in 65536 tries, and then only reaches
// a generation that drops an unknown connection ID.
//
// # Kernel and privileges
//
// Linux (unix datagram sockets, SCM_RIGHTS through package handoff); any
// kernel Go supports. No capability. The kernel's limit on a unix datagram
// socket's queue (net.unix.max_dgram_qlen, 10 by default) is why each
// destination has a queue of its own in user space.
//
// With privilege, the kernel can route instead (ListenSteered, and package
// steer's Config.JoinQUIC):
// each generation has a UDP socket of its own on the port, and package
// steer's SK_REUSEPORT program gives each datagram to the socket of the
// generation its connection ID names, so nothing is forwarded or handed
// over. Linux 5.14+, CAP_BPF and CAP_NET_ADMIN (or root), a bpf filesystem.
package quicdrain
