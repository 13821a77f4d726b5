// Package load is the load client of the zerodrop benchmarks: it sends HTTP/1.1
// (or HTTP/2) GET requests (or POSTs, with Config.Post) to one server, over
// TCP or TLS, classifies every outcome, and records every latency on a timeline that callers mark with
// their own events (restarts).
//
// # How it works
//
// A [Generator] runs either closed-loop (Config.Concurrency workers, each
// sending its next request as soon as the previous one ends) or open-loop
// (Config.Rate arrivals per second, whatever the server's pace). By default each
// request opens a new TCP connection, because a restart loses connections in
// accept queues and only new connections exercise them; Config.KeepAlive reuses
// connections instead.
//
// Config.Pool runs a sparse keep-alive pool instead, the way a reverse proxy's
// upstream connections look to a server: that many clients, each with a
// net/http Transport of its own holding one connection, each sending a POST
// (GetBody nil, so the Transport never retries it) at random intervals
// between Config.PoolMin and Config.PoolMax, open loop, its connection idle
// in between. A server that closes an idle connection races the client's
// next request on it; one that keeps it (or hands it to its successor) is
// never dialled again. Result.Dials counts the connections every mode
// opened: in a pool, Dials - Pool are reconnections.
//
// The default client is written by hand on a [net.Dialer]: it writes a minimal
// request, parses the reply with [net/http.ReadResponse] and never retries, so
// every failure the server causes is counted. Config.Transport uses
// [net/http.Transport] instead, which retries some failures on reused
// connections, as real Go clients do.
//
// # TLS and HTTP/2
//
// With an https URL every mode speaks TLS, with Config.TLS as the client's
// configuration: a new connection per request pays a full handshake each
// time, a kept-alive one once. Config.HTTP2 sends the GET requests over
// HTTP/2 (ALPN h2) through net/http's Transport instead, Config.StreamsPerConn
// workers sharing each Transport and its one connection, so many streams
// run on few connections. A Transport retries a stream the server refused or
// left above a GOAWAY's last stream id on another connection; such a request
// counts once, as its last try ended, and Result.Retried counts the requests
// sent more than once (seen with net/http/httptrace's GotConn).
//
// Config.Post makes every request a POST of a small body that the Transport
// cannot replay (GetBody nil, the body a plain io.Reader, as one streamed
// from a file is): over HTTP/2 a stream refused or left above a GOAWAY's
// last stream id fails, and so does a request that chose a connection just
// before its GOAWAY arrived. That is what a server's GOAWAY costs a client
// whose requests carry bodies.
//
// # Outcomes
//
// Every request ends in one [Class]: ok, reset (ECONNRESET, EPIPE), refused
// (ECONNREFUSED), eof (the connection ended before a full reply), timeout,
// status (a full reply with status 400 or above) or other. Latencies of ok
// requests go into HDR histograms (github.com/HdrHistogram/hdrhistogram-go,
// microsecond resolution, 3 significant digits); failures are counted by class.
//
// # Timeline and marks
//
// Each request belongs to the bucket (100 ms by default) in which it was sent;
// in open-loop runs, the moment it was due, so the time spent waiting for a
// free slot counts in its latency. [Generator.Mark] records an event; a bucket
// is "around" a mark when it overlaps [mark-Window, mark+Window] (±200 ms by
// default). The [Result] gives p50/p99/max over the whole run, over the steady
// buckets and over the buckets around marks, and per bucket its count,
// failures by class and p99. Buckets are summarised as soon as no later mark
// and no request still in flight can change them, so memory does not grow with
// the run's length beyond the bucket list itself.
//
// # Requirements
//
// None beyond a reachable server: no privileges, any OS. The default dialer is
// plain TCP, like Go's: an MPTCP client would change what the kernel does when a
// listener closes (see KERNEL.md).
//
// # Platform
//
// Linux only, as all of zerodrop: on another system the build stops with
// "undefined: zerodrop_supports_Linux_only" (zerodrop_other.go).
package load
