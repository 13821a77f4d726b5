package worker

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// EnvTickets, when set, has the handoff worker hand its TLS session-ticket
// keys to its successor with the listener (handoff.Config.TicketKeys, the
// keys installed into its TLS config), so that clients resume their
// sessions across restarts: the contender zd-tickets.
const EnvTickets = "ZD_BENCH_TICKETS"

// EnvTLSHandOver, when set, has the handoff worker serving TLS hand its
// idle TLS 1.3 HTTP/1.1 keep-alive connections to its successor with their
// session (drain.Server.TLSHandOver, as zerodrop.Options.TLSHandoff does):
// the contender zd-tls13, whose clients see neither a close nor a
// handshake at a restart.
const EnvTLSHandOver = "ZD_BENCH_TLS_HANDOVER"

// handshakes counts the TLS handshakes a worker served: full ones and those
// that resumed a session (the server's DidResume).
var handshakes struct{ full, resumed atomic.Int64 }

// countHandshakes has cfg count its handshakes in handshakes.
func countHandshakes(cfg *tls.Config) {
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.DidResume {
			handshakes.resumed.Add(1)
		} else {
			handshakes.full.Add(1)
		}
		return nil
	}
}

// logHandshakes tells the harness, on stdout, how many TLS handshakes this
// worker served: "tls <pid> <full> <resumed>" (the harness sums them per
// run), and the CPU time it used: "cpu <pid> <ns>" (user + system,
// getrusage RUSAGE_SELF; the harness sums it around restarts).
func (w *Worker) logHandshakes() {
	if !w.TLS() {
		return
	}
	fmt.Printf("tls %d %d %d\n", os.Getpid(), handshakes.full.Load(), handshakes.resumed.Load())
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) == nil {
		fmt.Printf("cpu %d %d\n", os.Getpid(), ru.Utime.Nano()+ru.Stime.Nano())
	}
}
