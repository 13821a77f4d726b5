package quicdrain_test

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/quic-go/qlogwriter"
)

// connWatch watches, through quic-go's qlog events, how each client
// connection ends: closed by a stateless reset, by the server before any
// HTTP/3 GOAWAY reached the client, or by its idle timeout (the server
// stopped answering). quic-go's client closes a connection itself once a
// GOAWAY found no request in flight: that is the end of a good drain.
type connWatch struct {
	opened, goaways                    atomic.Int64
	resets, beforeGoAway, idle, closed atomic.Int64
}

// tracer is the client's quic.Config.Tracer.
func (w *connWatch) tracer(context.Context, bool, quic.ConnectionID) qlogwriter.Trace {
	w.opened.Add(1)
	return &connTrace{w: w}
}

// connTrace is one connection's trace: the QUIC connection and the HTTP/3
// client each record to it (concurrently).
type connTrace struct {
	w      *connWatch
	goaway atomic.Bool
	once   sync.Once
}

func (c *connTrace) AddProducer() qlogwriter.Recorder { return c }
func (c *connTrace) SupportsSchemas(string) bool      { return true }
func (c *connTrace) Close() error                     { return nil }

func (c *connTrace) RecordEvent(ev qlogwriter.Event) {
	switch e := ev.(type) {
	case h3qlog.FrameParsed:
		if _, ok := e.Frame.Frame.(h3qlog.GoAwayFrame); ok && !c.goaway.Swap(true) {
			c.w.goaways.Add(1)
		}
	case qlog.ConnectionClosed:
		c.once.Do(func() { c.closedBy(e) })
	}
}

func (c *connTrace) closedBy(e qlog.ConnectionClosed) {
	c.w.closed.Add(1)
	switch {
	case e.Trigger == qlog.ConnectionCloseTriggerStatelessReset:
		c.w.resets.Add(1)
	case e.Trigger == qlog.ConnectionCloseTriggerIdleTimeout:
		c.w.idle.Add(1)
	case e.Initiator == qlog.InitiatorRemote && !c.goaway.Load():
		c.w.beforeGoAway.Add(1)
	}
}
