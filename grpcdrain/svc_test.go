package grpcdrain_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
)

// The test service, without generated code: raw bytes through a codec of
// our own (content-subtype "zdraw"), and a hand-written descriptor.
const (
	svcName   = "zerodrop.test.Echo"
	mUnary    = "/" + svcName + "/Pid"
	mCount    = "/" + svcName + "/Count"
	mForever  = "/" + svcName + "/Forever"
	codecName = "zdraw"
)

// rawCodec passes []byte messages through (a *[]byte to unmarshal into),
// and hands the others (the health service's) to the proto codec.
type rawCodec struct{}

func (rawCodec) Name() string { return codecName }

func (rawCodec) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case []byte:
		return m, nil
	case *[]byte:
		return *m, nil
	}
	if m, ok := v.(proto.Message); ok {
		return proto.Marshal(m)
	}
	return nil, fmt.Errorf("zdraw: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	if pm, ok := v.(proto.Message); ok {
		return proto.Unmarshal(data, pm)
	}
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("zdraw: cannot unmarshal into %T", v)
	}
	*m = append((*m)[:0], data...)
	return nil
}

func init() { encoding.RegisterCodec(rawCodec{}) }

// pidBytes is this process's pid, the answer of every call.
var pidBytes = []byte(strconv.Itoa(os.Getpid()))

// countMessages is how many messages Count sends, countGap the pause
// between two.
const (
	countMessages = 10
	countGap      = 2 * time.Millisecond
)

var echoDesc = grpc.ServiceDesc{
	ServiceName: svcName,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Pid",
		Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			return pidBytes, nil
		},
	}},
	Streams: []grpc.StreamDesc{
		{StreamName: "Count", ServerStreams: true, Handler: func(_ any, st grpc.ServerStream) error {
			var in []byte
			if err := st.RecvMsg(&in); err != nil {
				return err
			}
			for i := 0; i < countMessages; i++ {
				if i > 0 {
					time.Sleep(countGap)
				}
				if err := st.SendMsg(pidBytes); err != nil {
					return err
				}
			}
			return nil
		}},
		{StreamName: "Forever", ServerStreams: true, Handler: func(_ any, st grpc.ServerStream) error {
			var in []byte
			if err := st.RecvMsg(&in); err != nil {
				return err
			}
			for {
				if err := st.SendMsg(pidBytes); err != nil {
					return err
				}
				select {
				case <-st.Context().Done():
					return st.Context().Err()
				case <-time.After(10 * time.Millisecond):
				}
			}
		}},
	},
}

func dial(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(codecName)))
	if err != nil {
		tb.Fatal(err)
	}
	return cc
}

// callPid makes one unary call and returns the pid that answered.
func callPid(ctx context.Context, cc *grpc.ClientConn) (int, error) {
	var out []byte
	if err := cc.Invoke(ctx, mUnary, []byte("x"), &out); err != nil {
		return 0, err
	}
	return strconv.Atoi(string(out))
}

// callCount opens a Count stream and reads it to its end; it returns the
// pid that answered.
func callCount(ctx context.Context, cc *grpc.ClientConn) (int, error) {
	st, err := cc.NewStream(ctx, &echoDesc.Streams[0], mCount)
	if err != nil {
		return 0, err
	}
	if err := st.SendMsg([]byte("x")); err != nil {
		return 0, err
	}
	if err := st.CloseSend(); err != nil {
		return 0, err
	}
	pid, n := 0, 0
	for {
		var m []byte
		err := st.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return pid, fmt.Errorf("after %d messages: %w", n, err)
		}
		n++
		if pid, err = strconv.Atoi(string(m)); err != nil {
			return 0, err
		}
	}
	if n != countMessages {
		return pid, fmt.Errorf("stream ended after %d messages, want %d", n, countMessages)
	}
	return pid, nil
}

// load is unary callers and stream readers on a few client connections,
// until stopped or its time limit.
type load struct {
	ccs      []*grpc.ClientConn
	stopped  atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	unary    map[int]int // calls answered, by pid
	streams  map[int]int // streams read to their end, by pid
	failed   int
	firstErr error
}

// loadLimit bounds a load's run.
const loadLimit = 10 * time.Minute

// startLoad runs unary callers and stream readers, each kind spread over
// conns client connections to addr, and fresh callers that make each call
// on a client connection of its own.
func startLoad(t *testing.T, addr string, conns, unary, streams, fresh int) *load {
	l := &load{unary: map[int]int{}, streams: map[int]int{}}
	for range conns {
		l.ccs = append(l.ccs, dial(t, addr))
	}
	deadline := time.Now().Add(loadLimit)
	run := func(i int, call func(context.Context, *grpc.ClientConn) (int, error), by map[int]int) {
		defer l.wg.Done()
		cc := l.ccs[i%len(l.ccs)]
		for !l.stopped.Load() && time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			pid, err := call(ctx, cc)
			cancel()
			l.mu.Lock()
			if err != nil {
				l.failed++
				if l.firstErr == nil {
					l.firstErr = err
				}
			} else {
				by[pid]++
			}
			l.mu.Unlock()
		}
	}
	for i := range unary {
		l.wg.Add(1)
		go run(i, callPid, l.unary)
	}
	for i := range streams {
		l.wg.Add(1)
		go run(i, callCount, l.streams)
	}
	for i := range fresh {
		l.wg.Add(1)
		go run(i, func(ctx context.Context, _ *grpc.ClientConn) (int, error) {
			cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.CallContentSubtype(codecName)))
			if err != nil {
				return 0, err
			}
			defer cc.Close()
			return callPid(ctx, cc)
		}, l.unary)
	}
	t.Cleanup(l.stop)
	return l
}

// answeredBy is what pid answered so far (calls plus streams).
func (l *load) answeredBy(pid int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unary[pid] + l.streams[pid]
}

// waitFor waits until pid answered n calls and n streams, or 60 s.
func (l *load) waitFor(t *testing.T, pid, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		u, s := l.unary[pid], l.streams[pid]
		l.mu.Unlock()
		if u >= n && s >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("pid %d did not answer %d calls and %d streams in 60 s", pid, n, n)
}

// waitAny waits until pid answered anything, or 60 s.
func (l *load) waitAny(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for l.answeredBy(pid) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d answered nothing in 60 s", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop ends the load and closes its connections; safe twice.
func (l *load) stop() {
	if l.stopped.Swap(true) {
		return
	}
	l.wg.Wait()
	for _, cc := range l.ccs {
		cc.Close()
	}
}

// totals sums the answers.
func (l *load) totals() (unary, streams, failed int, firstErr error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range l.unary {
		unary += n
	}
	for _, n := range l.streams {
		streams += n
	}
	return unary, streams, l.failed, l.firstErr
}
