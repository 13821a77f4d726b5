// Command https is an HTTPS server, HTTP/2 and HTTP/1.1 by ALPN, that
// upgrades its own binary on SIGHUP without losing a request: the new process
// inherits the listening socket through package handoff (zerodrop.Serve), and
// the old one drains and exits.
//
// # How to run it
//
// From the repository (or go run ./https from its examples module):
//
//	go run ./examples/https
//
// It prints how to reach it; in another terminal:
//
//	curl --http2 --cacert /tmp/zerodrop-https-$(id -u)/cert.pem https://127.0.0.1:8443/     # generation 1 pid 4242 HTTP/2.0
//	curl --http1.1 --cacert /tmp/zerodrop-https-$(id -u)/cert.pem https://127.0.0.1:8443/   # ... HTTP/1.1
//	kill -HUP $(cat /tmp/zerodrop-https-$(id -u)/https.pid)                                 # generation 2
//
// SIGINT or SIGTERM drains and exits. With -cert and -key it serves that
// certificate; without them the first generation writes a new self-signed
// one (for 127.0.0.1, ::1 and localhost) next to the handoff socket, and its
// successors load it. That directory has a predictable name in $TMPDIR by
// default, so the example writes there only if it is ours and mode 0700 (it
// creates it so when missing), and creates cert.pem and key.pem with
// O_EXCL|O_NOFOLLOW: a directory another user made, or a symlink planted
// where the key goes, is refused with an error, and nothing is written.
//
// # How it works
//
// zerodrop.Serve serves an http.Server whose TLSConfig is set over TLS, with
// h2 offered by ALPN as net/http does. On SIGHUP it starts this executable
// again with the same arguments; the new process takes the listening socket
// over the handoff socket (-socket), serves, and tells the old one, which
// stops accepting without losing its queue, answers every request it
// accepted (HTTP/2 connections are sent GOAWAY, and streams in flight
// finish), and exits. The socket never closes, so no connection is refused
// or reset. Each response names the generation (1, then +1 per upgrade), the
// pid and the protocol, and carries the generation as X-Generation.
package main
