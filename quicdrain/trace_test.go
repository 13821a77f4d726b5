package quicdrain_test

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// connWatch watches, through quic-go's qlog events, how each client
// connection ends: by a stateless reset, by its idle timeout (the server
// stopped answering), closed by the server, or closed by the client after
// an HTTP/3 GOAWAY (quic-go's client closes with H3_NO_ERROR once a GOAWAY
// finds no request in flight, or its last one ends; nothing else in it
// closes with that code: http3.Transport.Close uses 0). The http3 events
// are not asked for: with a trace, quic-go v0.59.1's http3 client races
// (rawConn.closeQlogger clears the recorder its goroutines still read).
type connWatch struct {
	opened, closed, goaways, resets, idle, byServer atomic.Int64
}

// tracer is the client's quic.Config.Tracer.
func (w *connWatch) tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	w.opened.Add(1)
	return &connTrace{w: w}
}

// connTrace is one connection's trace.
type connTrace struct {
	w    *connWatch
	once sync.Once
}

func (c *connTrace) AddProducer() qlogwriter.Recorder   { return c }
func (c *connTrace) SupportsSchemas(schema string) bool { return schema == qlog.EventSchema }
func (c *connTrace) Close() error                       { return nil }

func (c *connTrace) RecordEvent(ev qlogwriter.Event) {
	if e, ok := ev.(qlog.ConnectionClosed); ok {
		c.once.Do(func() { c.closedBy(e) })
	}
}

func (c *connTrace) closedBy(e qlog.ConnectionClosed) {
	w := c.w
	w.closed.Add(1)
	switch {
	case e.Trigger == qlog.ConnectionCloseTriggerStatelessReset:
		w.resets.Add(1)
	case e.Trigger == qlog.ConnectionCloseTriggerIdleTimeout:
		w.idle.Add(1)
	case e.Initiator == qlog.InitiatorRemote:
		w.byServer.Add(1)
	case e.ApplicationError != nil && *e.ApplicationError == qlog.ApplicationErrorCode(http3.ErrCodeNoError):
		w.goaways.Add(1)
	}
}

// refusals counts, in a server (the h3gen helper), the connections it
// closed with CONNECTION_REFUSED (quic-go: its accept queue was full, or
// the listener closed during the handshake), while serving and while
// draining.
var refusals refusalWatch

type refusalWatch struct {
	draining       atomic.Bool
	serving, drain atomic.Int64
}

func (w *refusalWatch) tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	return refusalTrace{w}
}

type refusalTrace struct{ w *refusalWatch }

func (r refusalTrace) AddProducer() qlogwriter.Recorder { return r }
func (r refusalTrace) SupportsSchemas(string) bool      { return false }
func (r refusalTrace) Close() error                     { return nil }

func (r refusalTrace) RecordEvent(ev qlogwriter.Event) {
	e, ok := ev.(qlog.ConnectionClosed)
	if !ok || e.Initiator != qlog.InitiatorLocal || e.ConnectionError == nil || *e.ConnectionError != qlog.TransportErrorCode(quic.ConnectionRefused) {
		return
	}
	if r.w.draining.Load() {
		r.w.drain.Add(1)
	} else {
		r.w.serving.Add(1)
	}
}
