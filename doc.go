// Package zerodrop serves an HTTP server as one generation of a service that
// restarts, upgrades and reloads without losing a connection or a request,
// on Linux. It composes the packages below it, which remain usable on their
// own:
//
//   - reuseport creates listening sockets with one explicit option set;
//   - handoff passes them from a running process to its successor (and
//     handoff/systemd takes them from systemd socket activation);
//   - drain stops a listener without losing its accept queue, and drains an
//     http.Server without losing a request.
//
// Serve does what every example in this repository used to wire by hand:
//
//	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
//	rep, err := zerodrop.Serve(ctx, srv, []string{":8080"}, zerodrop.Options{
//		Config: zerodrop.Config{
//			Handoff:   handoff.Config{Path: "/run/app/handoff.sock"}, // a successor takes the sockets over
//			Successor: zerodrop.ReExec,                             // SIGHUP starts this executable again
//		},
//		ReadyPath: "/ready", // 200 while serving, 503 once draining
//	})
//
// Started again with the same Handoff.Path (by SIGHUP, which starts
// Config.Successor, by a deploy tool with handoff.Upgrade, or by
// systemd's ExecReload=), the new process inherits the listening sockets,
// serves them, and the old one drains: no connection is refused, reset or
// left unanswered. Without Handoff, or when no predecessor answers, the
// listeners come from systemd socket activation when systemd passed them
// (LISTEN_FDS), else they are fresh. Under systemd (NOTIFY_SOCKET), Serve
// sends READY=1, MAINPID= after a reload, STOPPING=1 at a stop, and the
// watchdog pings systemd asks for; it starts a successor as systemd's child
// (systemd.StartSuccessor), so that systemd waits for its drain at the next
// stop.
//
// # Generations of other servers
//
// Serve is built on Open: a Generation is one process's listeners, taken the
// same way, with Ready, Wait and Stopping, which Generation.Run drives for a
// Service; grpcdrain.Serve (a grpc.Server) and quicdrain.Serve (HTTP/3) run
// on one. Open takes a Config, what every generation honours (handoff,
// signals, successor, delay, grace, logger, hooks), and so do those two.
// Serve's Options is a Config plus what only an http.Server has (ReadyPath,
// Drain, NoConnHandoff, TLSHandoff, Pool, NoTicketHandoff): giving one of
// those to grpcdrain.Serve does not compile.
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package zerodrop
