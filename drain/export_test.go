package drain

import (
	"net"
	"net/http"
)

// WatchTLS wraps l as ServeTLS does before handing it to crypto/tls, for
// BenchmarkTLSHandshake.
func WatchTLS(l net.Listener) net.Listener { return tlsListener{l, newTracker(&http.Server{}), nil} }

// SetTestHookHandshakes makes f run once a stepped-out stop has listed the
// handshakes it waits for (for the tests of package drain_test), until the
// returned func is called.
func SetTestHookHandshakes(f func(n int)) (restore func()) {
	testHookHandshakes = f
	return func() { testHookHandshakes = nil }
}

// SetTestHookInspected makes f run each time a step-out has listed the group
// and its holders, before it reads the members' CPUs (f may change the
// holders), until the returned func is called.
func SetTestHookInspected(f func()) (restore func()) {
	testHookInspected = f
	return func() { testHookInspected = nil }
}

// SetTestHookConnState makes f run each time a connection of any Server
// changes state, before the Server follows the change (f may hold it), until
// the returned func is called. Set it before the server serves.
func SetTestHookConnState(f func(http.ConnState)) (restore func()) {
	testHookConnState.Store(&f)
	return func() { testHookConnState.Store(nil) }
}

// SetTestHookStopListener makes f run as a Server's Shutdown begins to stop
// its listener (it may hold the stop), until the returned func is called.
// Set it before the server serves.
func SetTestHookStopListener(f func()) (restore func()) {
	testHookStopListener = f
	return func() { testHookStopListener = nil }
}

// SetTestHookListenerStopped makes f run once a Server's Shutdown has
// stopped its listener, before it goes on (f may hold it there), until the
// returned func is called. Set it before the server serves.
func SetTestHookListenerStopped(f func()) (restore func()) {
	testHookListenerStopped = f
	return func() { testHookListenerStopped = nil }
}

// SetTestHookLeft makes f run once a stop has told the clients to leave
// (f may hold the stop there), until the returned func is called. Set it
// before the server serves.
func SetTestHookLeft(f func()) (restore func()) {
	testHookLeft = f
	return func() { testHookLeft = nil }
}

// SetTestHookFirstStep makes f run once an HTTP/2 connection's first step
// (GOAWAY 2^31-1 and PING) is written, with the client's address and how
// many probes it acked, until
// the returned func is called. Set it before the server serves.
func SetTestHookFirstStep(f func(remote string, rounds int)) (restore func()) {
	testHookFirstStep = f
	return func() { testHookFirstStep = nil }
}

// SetTestHookGoAway makes f run when an HTTP/2 connection is given its first
// step (before the probes, which delay its write), with the client's
// address, until the returned func is called. Set it before the server
// serves.
func SetTestHookGoAway(f func(remote string)) (restore func()) {
	testHookGoAway = f
	return func() { testHookGoAway = nil }
}
