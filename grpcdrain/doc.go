// Package grpcdrain drains a grpc-go server without losing an RPC, and runs
// it as one generation of a service upgraded through package handoff.
//
// It is a module of its own (github.com/zerodrop/zerodrop/grpcdrain), so that
// users of the core module never download grpc-go. The package (and its
// directory) is named grpcdrain, not grpc, so that it does not shadow
// google.golang.org/grpc in the files that use both: it is to a
// *grpc.Server what package drain is to an *http.Server.
//
// This comment is longer than a screen: it says what each phase of a stop
// does to RPCs a caller cannot see. The API itself fits one screen: go doc
// -short github.com/zerodrop/zerodrop/grpcdrain.
//
// # The phases
//
// grpc.Server.GracefulStop alone closes its listeners (a plain close: with
// no reuseport sibling and migration the accept queue is reset), closes
// every connection it accepted but had not begun to serve, and then waits
// for every RPC, a stream that never ends included (grpc-go #2448).
// Server.Shutdown runs, each phase bounded by its ctx:
//
//  1. The health service (grpc.health.v1, package
//     google.golang.org/grpc/health) answers NOT_SERVING for every
//     service, the whole server ("") included, and keeps serving for
//     Config.Delay, so that load balancers move first.
//  2. Every listener stops without losing its queue (drain.Listener.Stop:
//     released to a successor after a handoff, migrated to reuseport
//     siblings, or accepted until empty), and every connection accepted
//     is handed to gRPC, which begins its handshake.
//  3. Health watches end (a last NOT_SERVING, then status OK), and
//     GracefulStop sends every connection a GOAWAY (grpc-go's two-step one:
//     a first GOAWAY and a PING, then the last stream id), so streams in
//     flight finish and clients open new ones on another connection.
//  4. At the deadline, the RPCs still in flight are named in the report
//     (Report.Forced) and Stop ends them; connections still in their
//     handshake are closed.
//
// RPCs are counted by a stats.Handler that New installs (it is chained with
// any the caller passes). The report also carries each listener's
// drain.Report.
//
// # Generations
//
// Serve composes the pieces as zerodrop.Serve does for an http.Server:
// listeners inherited through handoff, else activated by systemd, else
// fresh reuseport sockets; readiness told to the predecessor and systemd;
// an upgrade signal starts a successor; the drain runs when the successor
// is ready, on a stop signal or when ctx ends. It is built on
// zerodrop.Open and Generation.Run, as zerodrop.Serve is, with a
// zerodrop.Service that serves the Server, and takes a zerodrop.Config:
// zerodrop.Options' HTTP fields (ReadyPath, Drain, NoConnHandoff,
// TLSHandoff, Pool, NoTicketHandoff) are not in that type, so the compiler
// refuses what gRPC cannot do.
//
// A client that checks health on its own connections (a grpc-go
// healthCheckConfig) sees NOT_SERVING from the start of the drain, also
// when a successor took over through handoff: with a single address, it
// waits for a new connection, which reaches the successor.
//
// # TLS and session tickets
//
// grpcdrain has no TLS of its own: gRPC over TLS is the grpc.Creds option
// given to New (credentials.NewTLS), whose tls.Config grpc-go keeps to
// itself (a clone). So Serve cannot install session-ticket keys the way
// zerodrop.Serve does for an http.Server's TLSConfig; the caller does, and
// Serve carries them: make ticket.New keys, Install them into the
// tls.Config before credentials.NewTLS takes it (the clone shares their
// hooks), and set zerodrop.Config.Handoff.TicketKeys. Serve then hands them to the
// successor with the sockets (handoff.Config.TicketKeys) and, under
// systemd, keeps them in its fd store for a restart (zerodrop.Generation),
// so that a client reconnecting after a restart resumes its session
// instead of a full handshake (TestServeTLSResumes). Without TicketKeys
// each generation draws its own keys, as before. Connections are never
// handed over: each gets the two-step GOAWAY of the drain.
//
// # Kernel requirements
//
// Those of package drain (Linux; sock_diag). MPTCP listeners are refused:
// use reuseport.Listen or net.ListenConfig.SetMultipathTCP(false).
package grpcdrain
