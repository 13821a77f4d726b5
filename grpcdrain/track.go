package grpcdrain

import (
	"context"
	"net"
	"sort"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/stats"
)

// tracker counts RPCs (a stats.Handler), the connections gRPC accepted, and
// the health watches, for Shutdown.
type tracker struct {
	mu        sync.Mutex
	rpcs      map[*rpc]struct{}
	draining  bool
	completed int // RPCs ended after the drain began
	failed    int // of those, with an error
	conns     map[*trackedConn]struct{}
	changed   chan struct{} // closed and replaced when a conn starts or closes
	nconns    int           // transports open (stats ConnBegin minus ConnEnd)
	watchEnd  chan struct{} // closed when health watches must end
}

// rpc is one RPC in flight.
type rpc struct {
	method string
	stream bool // client or server streaming
	begin  time.Time
}

func newTracker() *tracker {
	return &tracker{rpcs: map[*rpc]struct{}{}, conns: map[*trackedConn]struct{}{},
		changed: make(chan struct{}), watchEnd: make(chan struct{})}
}

type rpcKey struct{}

// TagRPC implements stats.Handler.
func (t *tracker) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, rpcKey{}, &rpc{method: info.FullMethodName})
}

// HandleRPC implements stats.Handler.
func (t *tracker) HandleRPC(ctx context.Context, s stats.RPCStats) {
	r, _ := ctx.Value(rpcKey{}).(*rpc)
	if r == nil {
		return
	}
	switch s := s.(type) {
	case *stats.Begin:
		t.mu.Lock()
		r.stream, r.begin = s.IsClientStream || s.IsServerStream, s.BeginTime
		t.rpcs[r] = struct{}{}
		t.mu.Unlock()
	case *stats.End:
		t.mu.Lock()
		if _, ok := t.rpcs[r]; ok {
			delete(t.rpcs, r)
			if t.draining {
				t.completed++
				if s.Error != nil {
					t.failed++
				}
			}
		}
		t.mu.Unlock()
	}
}

// TagConn implements stats.Handler.
func (t *tracker) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

// HandleConn implements stats.Handler.
func (t *tracker) HandleConn(_ context.Context, s stats.ConnStats) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s.(type) {
	case *stats.ConnBegin:
		t.nconns++
	case *stats.ConnEnd:
		t.nconns--
	}
}

// begin marks the start of the drain and returns the RPCs in flight.
func (t *tracker) begin() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.draining = true
	return len(t.rpcs)
}

func (t *tracker) counts() (completed, failed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.completed, t.failed
}

func (t *tracker) transports() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nconns
}

// open names the RPCs still in flight, oldest first.
func (t *tracker) open(now time.Time) []ForcedRPC {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]ForcedRPC, 0, len(t.rpcs))
	for r := range t.rpcs {
		out = append(out, ForcedRPC{Method: r.method, Stream: r.stream, Age: now.Sub(r.begin)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Age > out[j].Age })
	return out
}

// endWatches ends the health service's Watch streams.
func (t *tracker) endWatches() {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.watchEnd:
	default:
		close(t.watchEnd)
	}
}

// waitStarted waits until gRPC has begun serving every connection accepted
// (its handleRawConn sets a deadline on the raw connection first thing,
// after it checked whether the server stops: a connection it has not
// reached yet when GracefulStop begins is closed unserved), or ctx ends.
func (t *tracker) waitStarted(ctx context.Context) error {
	for {
		t.mu.Lock()
		waiting := 0
		for c := range t.conns {
			if !c.started {
				waiting++
			}
		}
		ch := t.changed
		t.mu.Unlock()
		if waiting == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// closeConns closes every connection still open: those still in their
// handshake would hold Stop until gRPC's connection timeout.
func (t *tracker) closeConns() {
	t.mu.Lock()
	cs := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (t *tracker) signalLocked() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// trackedListener hands gRPC connections the tracker follows.
type trackedListener struct {
	net.Listener // a *drain.Listener
	t            *tracker
}

// Accept implements net.Listener.
func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, t: l.t}
	l.t.mu.Lock()
	l.t.conns[tc] = struct{}{}
	l.t.mu.Unlock()
	return tc, nil
}

// trackedConn is an accepted connection; started once gRPC set its first
// deadline.
type trackedConn struct {
	net.Conn
	t       *tracker
	started bool // guarded by t.mu
	once    sync.Once
}

// SetDeadline implements net.Conn.
func (c *trackedConn) SetDeadline(d time.Time) error {
	c.t.mu.Lock()
	if !c.started {
		c.started = true
		c.t.signalLocked()
	}
	c.t.mu.Unlock()
	return c.Conn.SetDeadline(d)
}

// Close implements net.Conn.
func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.signalLocked()
		c.t.mu.Unlock()
	})
	return err
}

// SyscallConn returns the raw connection (for channelz's socket options).
func (c *trackedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, syscall.EINVAL
}
