// Package handoff passes listening sockets from a running process to its
// successor over a unix socket, so that a restart or an upgrade never closes a
// listening socket and never loses a connection.
//
// This comment is longer than a screen on purpose: each section below is a
// guarantee callers rely on and no one function's comment can hold (who
// owns a socket, when a successor starts fresh, whom the handoff socket
// accepts, what becomes of a connection in transit, what the server bounds).
// The API itself fits one screen: go doc -short
// github.com/zerodrop/zerodrop/handoff. The wire protocol is described in
// wire.go, beside the code that speaks it.
//
// # How it works
//
// A process creates an Upgrader with New. If a predecessor serves the handoff
// socket (Config.Path), New connects, checks the predecessor's credentials,
// and receives its sockets (SCM_RIGHTS) with their declared metadata; each fd
// is validated before it is accepted. Listen and ListenPacket then return the
// inherited socket of that name, or, if there is none, one from systemd socket
// activation (package handoff/systemd), or a fresh one (package reuseport for
// TCP and UDP). Both processes now hold the same kernel socket and share its
// accept queue: nothing is queued, migrated or reset.
//
// Ready tells the predecessor to stop: its Exit channel closes, and it should
// close its listeners (only its references; the sockets stay open in the
// successor) and drain. The handoff socket itself is handed over the same
// way: the predecessor passes it with the listeners, and the successor
// serves that same socket after Ready (see "One lineage" below). Accepting before Ready means there is no moment when
// nobody accepts; connections accepted by a successor that then dies before
// Ready are lost with it, so a successor that may fail its start-up should
// accept only after Ready (the kernel queues meanwhile). After Ready the new
// process serves the handoff socket for its own successor, with Generation one
// higher. Upgrade is the synchronous trigger for deploy tools: it starts the new
// process and returns only when a newer generation answers on the handoff
// socket, or with the reason it did not.
//
//	u, err := handoff.New(ctx, handoff.Config{Path: "/run/app/handoff.sock"})
//	ln, err := u.Listen(ctx, "http", "tcp", ":8080")
//	go srv.Serve(ln)
//	err = u.Ready()
//	<-u.Exit()         // a successor is ready
//	ln.Close()         // stop accepting; then drain and exit
//	u.Close()
//
// # Ownership
//
// A socket handed to a successor (from the moment it is sent; the mark is
// taken back if that handoff fails), one received from a predecessor, and
// one from systemd (activation, or systemd.Notifier.Store) is held by
// another process too. The Upgrader records that (internal package shared,
// keyed by the socket's device and inode), and package drain reads it: such a
// socket's drain closes our fd and never calls shutdown(), which would stop it
// listening in the successor too. This does not depend on reading the other
// process's /proc/PID/fd (a non-dumpable successor, another UID through
// AllowUIDs, hidepid or a PID namespace hide it). A listener closed without
// package drain is only closed, which is a release too.
//
// # One lineage
//
// Only the first generation creates the handoff socket (and a generation
// whose predecessor is an older release that does not pass it). From then on
// the socket is passed along: the predecessor sends it after the last fd
// batch, stops accepting on it after the successor's ready by closing its fd
// only (never unlinking the file, never shutting the socket down), and the
// successor serves it after done. So the name stays bound and the file (same
// inode) stays in place while any generation lives: nobody else can bind an
// abstract name between handoffs, and a successor never finds the path
// refusing and mistakes a live lineage for a stale file. A connection made
// while the predecessor no longer accepts and the successor not yet serves
// waits in the socket's queue and is answered by the successor.
//
// A successor therefore starts fresh only when the path refuses (or is
// absent): nobody holds the socket. Two successors racing: the one the
// predecessor takes first inherits; the other is either refused with
// ErrHandoffInProgress (New returns it at once and does not retry: when to
// try again is the deploy tool's or supervisor's choice), or, if it connected
// once the predecessor had stopped accepting, waits in the queue and inherits
// from the winner, one generation later. A predecessor that hangs up before
// sending any socket is dialled again (at most 6 times in all, within
// Config.Timeout): if its handoff socket lives on in another process, that one
// answers; New starts fresh only if the path then refuses, and fails if it
// still answers after the last hang-up. (One that dies after sending some
// sockets had not sent its handoff socket yet: nobody else holds it.) A predecessor that accepts the
// connection (or lets it queue) but sends no hello within Config.Timeout, for
// example because its serve loop is wedged, makes New fail with ErrNoAnswer
// (in a *net.OpError, logged as handoff.no_answer): starting fresh beside a
// live predecessor would make a second set of listening sockets, a second
// lineage, next to the first; the application decides (retry, alert, or stop
// the predecessor first).
//
// # Security
//
// Both ends check the peer's credentials: by default only a process with our
// effective UID may fetch fds, or serve them; Config.AllowUIDs widens that.
// The predecessor reads its successor's with SO_PEERCRED (the process that
// connected). The successor cannot: on the dialling side SO_PEERCRED names
// the process that called listen(), generation 1 once the handoff socket is
// passed from generation to generation. It dials with SO_PASSCRED instead,
// and checks the credentials the kernel attaches to every frame its
// predecessor writes (SCM_CREDENTIALS: the writer's own pid, uid and gid,
// which it cannot forge without CAP_SYS_ADMIN or CAP_SETUID). The first generation (or one whose predecessor sent no
// handoff socket) creates the socket file mode 0600 under a temporary name and
// renames it into place; later generations serve the socket they inherited, so
// the file and its inode never change. New refuses a directory that group or others may write to, or that
// belongs to another user, and an ancestor directory that group or others may
// write to without the sticky bit (*InsecurePathError); the PID file's
// directory is checked the same way, and its temporary file is created with
// O_EXCL|O_NOFOLLOW before the predecessor hears anything. New also refuses,
// with a *PathError (ErrBadPath), an empty path, a path (or its temporary
// name) too long for a unix socket address, and a path where something other
// than a socket exists. An abstract name ("@name") has
// no file and no permissions; the credential check guards it, but anyone may
// squat a free abstract name: it is free only before the first generation
// binds it and after the last one exits. A successor that inherits the
// handoff socket checks that the file at Path is a socket of mode 0600 owned
// by an allowed UID, and that the inherited socket is a listening unix stream
// socket bound to Path (an abstract name) or to a name in Path's directory.
// A stale socket file (its process died: connect
// gives ECONNREFUSED) is replaced; Listen("unix", p) likewise replaces only a
// stale socket, never another kind of file. Each received fd is checked: fstat says
// socket; SO_DOMAIN, SO_TYPE and SO_PROTOCOL fit the declared kind and network;
// SO_ACCEPTCONN is set for listeners; getsockname equals the declared address;
// the declared option values agree with the socket's on every option both
// releases read (or, from a predecessor that sends no values, the version 1
// digest hash is equal) (*ValidationError). reuseport reads each socket once
// (reuseport.ReadFD). Listen then compares the inherited socket's options with
// Config.Listen (reuseport.Config.Check: every option equal, the backlog what
// Config.Listen asks clamped to net.core.somaxconn) and fails
// with *reuseport.OptionMismatchError naming each difference (or logs it, with
// WarnOnMismatch): the kernel docs warn that migrating between listeners with
// different options may break programs. Every fd of a failed or partial
// transfer is closed; the predecessor keeps serving and counts the failure.
//
// # Passing connections
//
// A listening socket is shared: both processes hold it. A connection
// accepted by the predecessor is the predecessor's alone, and a restart
// used to end it. With protocol version 2 the predecessor can pass its
// connections to the successor instead (for HTTP, package drain does it for
// idle keep-alive connections; the root package wires it for zerodrop.Serve):
//
//	// successor, before Ready: who takes the connections of "http"
//	u.HandleConns("http", func(pc handoff.PassedConn) { serve(pc.Conn, pc.State) })
//	// predecessor, once Exit is closed:
//	if u.TakesConns("http") {
//		passed, err := u.PassConns(ctx, conns) // conns[:passed] are the successor's
//	}
//
// A passed connection is the same kernel socket: the client sees nothing,
// no new handshake, and whatever it sent meanwhile waits in the socket.
// State carries what the sender had read and not consumed. Each fd is
// validated like a listener (a connected TCP socket of the declared family,
// established or in CLOSE_WAIT, with the declared local and peer address),
// and a batch is acknowledged only once every fd of it is validated and made
// a *net.TCPConn: until the ack the predecessor's fds stay open, so a
// successor that refuses, dies or hangs leaves every connection of that
// batch with the predecessor (ErrNotTaken), and no connection is ever served
// by both. A batch is refused as a whole (ErrValidation) when a connection
// of it is not bound to the address of the listener it is declared for (the
// successor's listener of that name; a ConnListener's ConnsConfig.Addrs), or
// when a socket comes twice, in the batch or again while a connection of
// ours holds it (by inode): no socket goes to two servers. TLS connections
// cannot be passed (their session keys live in crypto/tls).
//
// The ack decides who has a batch, and both sides read it the same way. A
// sender whose Timeout, or PassConns ctx, ended before an ack came shuts its
// side for reading, so that the receiver's ack can no longer be sent (the
// receiver then closes the batch), and takes the ack that came before, if
// any, from its receive queue, without waiting and whatever the deadlines
// say: the kernel queues a unix stream's data and checks the shutdown under
// one lock, so the queue then holds all of the ack there will ever be,
// however late the sender runs. A successor that begins to drain calls StopTakingConns
// (zerodrop.Serve does), after which it acknowledges nothing: every batch
// it acknowledged has gone to its handlers before its drain.Server stops
// taking connections (ServeConn closes one given later).
//
// Workers of a SO_REUSEPORT pool pass their connections to a sibling the
// same way (ListenConns, DialConns). A ConnListener holds at most 16
// conversations ("busy" beyond, ErrBusy), each for at most its Timeout
// without a batch (logged as handoff.conns_idle); ListenConns refuses a
// path a live listener answers on (ErrPathInUse) and replaces a stale
// socket file. A Pool (JoinPool) is a worker's place in a directory the
// pool's workers share: its ConnListener while it runs, and at its stop a
// sender to the newest sibling there that takes its connections
// (Pool.PassConns, for a drain.Server's HandOver). zerodrop.Serve's
// Options.Pool uses it; a worker that builds its own listeners (for
// example reuseport's ListenPerCPU) and drain.Servers (with StepOut) joins
// a pool the same way.
//
// # Session-ticket keys
//
// A TLS client that reconnects after a restart resumes its session only if
// the successor can decrypt the ticket the predecessor gave it. With
// Config.TicketKeys (a *ticket.Keys) on both sides, the keys travel with
// the sockets: the successor's hello asks for them ("tickets":true), the
// offer says they follow, and after the fd batches the predecessor sends one
// fd, a memfd sealed against any change (ticket.Keys.Export), never the key
// bytes in a frame; the successor checks that it is such a memfd
// (ticket.Keys.Import) and installs the keys (the predecessor's newest goes
// on encrypting while young; the others decrypt for the tickets' lifetime:
// see package ticket). Only a successor that passed the credential checks
// above (SO_PEERCRED: our UID or AllowUIDs) gets that far; an observer never
// gets keys; nothing about them is logged but their number. A memfd the
// successor cannot import fails the handoff ("validation"; the predecessor
// keeps serving). zerodrop.Serve sets TicketKeys for a server with a
// TLSConfig. Without TicketKeys on either side nothing changes: a release
// before this one neither asks nor sends (see the wire protocol, in wire.go). A restart
// by systemd, with no predecessor, finds the keys in the fd store instead
// (handoff/systemd.Activation.Tickets; zerodrop.Generation stores and
// imports them).
//
// # Limits
//
// The handoff server reads a frame into a buffer that grows as its bytes
// arrive (from 512 bytes, doubling), so a header announcing 1 MiB costs
// nothing until the bytes come. It holds at most 64 conversations at once;
// each may buffer 4 KiB of its own, and larger frames draw on 2 MiB shared by
// all of them: at most about 2.3 MiB in all. Over a bound the server answers
// "busy": a newcomer takes the place of the conversation without hello that
// has been idle longest, since it was accepted or since its read last found
// no bytes (that one is told "busy"), and is itself told "busy" only when no
// conversation may give way. A conversation gives way only while nothing is
// queued on its socket and it is not busy with bytes it read: one that said
// hello (the successor's, an observer's), or whose hello is in its receive
// queue, never does, whatever its goroutine is doing, so stalled connections
// cannot starve a successor: it sends its hello as it connects, and could
// give way only if 64 newcomers accepted after it were admitted before its
// bytes arrived. A successor told "busy" dials again, after 5 ms doubling
// to 200 ms, until its Config.Timeout (logged as handoff.busy_retry); New
// then fails with the last ErrBusy, which also matches
// context.DeadlineExceeded. A peer that sends part of a frame and stops is protected
// only until the server has read those bytes (it then waits, idle), and its
// read ends at the Timeout if nobody takes its place. A failed accept (a full
// fd table: EMFILE, ENFILE, ENOBUFS...) is logged (handoff.accept_error) and retried
// after 5 ms, doubling up to 1 s, until the server is closed. A full backlog
// of the handoff socket (a connect flood: connect fails with EAGAIN) is
// retried by the successor, and by Observe, until its Timeout or ctx ends.
//
// # Kernel and privileges
//
// Linux; SCM_RIGHTS, SO_PEERCRED, SO_DOMAIN and SO_PROTOCOL need Linux 2.6.32+,
// MSG_CMSG_CLOEXEC 2.6.23+. No capability is needed; an fd passed keeps its
// creator's UID, which is what the kernel compares when a reuseport group is
// joined.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package handoff
