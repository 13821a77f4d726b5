package grpcdrain_test

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	grpcdrain "github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// newServer is a Server with the test service, SERVING, on a fresh
// 127.0.0.1 listener; Serve runs until the test ends.
func newServer(t *testing.T, cfg grpcdrain.Config) (*grpcdrain.Server, string, func() error) {
	t.Helper()
	s := grpcdrain.New(cfg)
	s.GRPC().RegisterService(&echoDesc, struct{}{})
	s.Health().SetServingStatus(svcName, healthpb.HealthCheckResponse_SERVING)
	l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var serveErr error
	go func() { serveErr = s.Serve(l); close(done) }()
	served := func() error { <-done; return serveErr }
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		served()
	})
	return s, l.Addr().String(), served
}

// TestForcedStream: a stream that outlives the deadline is ended by Stop
// and named in the report; a unary call and a Count stream in flight at
// the start complete; Serve returns nil.
func TestForcedStream(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s, addr, served := newServer(t, grpcdrain.Config{})
		cc := dial(t, addr)
		defer cc.Close()
		st, err := cc.NewStream(context.Background(), &echoDesc.Streams[1], mForever)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.SendMsg([]byte("x")); err != nil {
			t.Fatal(err)
		}
		var m []byte
		if err := st.RecvMsg(&m); err != nil { // the stream is open on the server
			t.Fatal(err)
		}
		countDone := make(chan error, 1)
		go func() { _, err := callCount(context.Background(), cc); countDone <- err }()

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		rep, err := s.Shutdown(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Shutdown: %v, want an error wrapping context.DeadlineExceeded", err)
		}
		t.Logf("report %+v", rep)
		if len(rep.Forced) != 1 || rep.Forced[0].Method != mForever || !rep.Forced[0].Stream {
			t.Errorf("forced %+v, want the one %s stream", rep.Forced, mForever)
		}
		if rep.Remainder() != 0 || len(rep.Listeners) != 1 {
			t.Errorf("listeners %+v, want one with remainder 0", rep.Listeners)
		}
		for {
			err = st.RecvMsg(&m)
			if err != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("the forced stream ended with status OK, want an error")
		}
		if err := <-countDone; err != nil {
			t.Errorf("a Count stream begun before the drain: %v", err)
		}
		if err := served(); err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
		if rep.Completed < 1 || rep.Failed != 1 {
			t.Errorf("completed %d failed %d, want at least 1 and exactly 1 (the forced stream)", rep.Completed, rep.Failed)
		}
	})
}

// TestHealthDuringDelay: during the Delay, a real health client answers
// NOT_SERVING for the server and the service, on a connection open before
// the drain and on one opened during the Delay (so the listener still
// accepts); calls still succeed; a Watch stream sees SERVING, NOT_SERVING,
// then ends with status OK; nothing is forced.
func TestHealthDuringDelay(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		const delay = 2 * time.Second
		s, addr, served := newServer(t, grpcdrain.Config{Delay: delay})
		cc := dial(t, addr)
		defer cc.Close()
		hc := healthpb.NewHealthClient(cc)
		ctx := context.Background()
		for _, svc := range []string{"", svcName} {
			if got := check(t, hc, svc); got != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("before the drain %q is %v, want SERVING", svc, got)
			}
		}
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: svcName})
		if err != nil {
			t.Fatal(err)
		}
		if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("watch: %v %v, want SERVING", m, err)
		}

		type result struct {
			rep *grpcdrain.Report
			err error
		}
		shut := make(chan result, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			rep, err := s.Shutdown(sctx)
			shut <- result{rep, err}
		}()
		if m, err := w.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("watch: %v %v, want NOT_SERVING", m, err)
		}
		cc2 := dial(t, addr) // a connection made during the Delay
		defer cc2.Close()
		for _, c := range []*grpc.ClientConn{cc, cc2} {
			for _, svc := range []string{"", svcName} {
				if got := check(t, healthpb.NewHealthClient(c), svc); got != healthpb.HealthCheckResponse_NOT_SERVING {
					t.Errorf("during the Delay %q is %v, want NOT_SERVING", svc, got)
				}
			}
			if _, err := callPid(ctx, c); err != nil {
				t.Errorf("a call during the Delay: %v", err)
			}
		}
		select {
		case r := <-shut:
			t.Fatalf("Shutdown returned (%v) before the checks ended: the Delay is too short for this machine", r.err)
		default:
		}
		if m, err := w.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("watch after the Delay: %v %v, want its end with status OK", m, err)
		}
		r := <-shut
		if r.err != nil || len(r.rep.Forced) != 0 || r.rep.DelayTook < delay {
			t.Errorf("Shutdown: %v, forced %v, delay took %v", r.err, r.rep.Forced, r.rep.DelayTook)
		}
		if err := served(); err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
		if _, err := callPid(ctx, cc); status.Code(err) != codes.Unavailable {
			t.Errorf("a call after the drain: %v, want Unavailable", err)
		}
	})
}

func check(t *testing.T, hc healthpb.HealthClient, svc string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		t.Fatalf("health check %q: %v", svc, err)
	}
	return r.Status
}

// TestServeAfterShutdown: Serve after Shutdown closes its listener and
// returns grpc.ErrServerStopped; a second Shutdown gets the same report;
// a nil listener is an error matching drain.ErrNilListener.
func TestServeAfterShutdown(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s, _, _ := newServer(t, grpcdrain.Config{})
		r1, err := s.Shutdown(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		r2, err := s.Shutdown(context.Background())
		if err != nil || r2 == r1 || r2.Took != r1.Took {
			t.Errorf("second Shutdown: %p %v (first %p), want a copy of the same report", r2, err, r1)
		}
		l, err := reuseport.Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Serve(l); !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve after Shutdown: %v, want grpc.ErrServerStopped", err)
		}
		if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
			t.Errorf("the listener given after Shutdown still accepts")
		}
		if err := grpcdrain.New(grpcdrain.Config{}).Serve(nil); !errors.Is(err, drain.ErrNilListener) {
			t.Errorf("Serve(nil): %v, want drain.ErrNilListener", err)
		}
	})
}
