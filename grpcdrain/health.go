package grpcdrain

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is grpc-go's health service, except that Watch streams end
// (status OK, after a last NOT_SERVING) when the drain reaches GracefulStop:
// grpc-go's Watch never returns by itself, and GracefulStop would wait for
// it until the deadline.
type healthService struct {
	*health.Server
	t *tracker
}

// Watch implements healthpb.HealthServer.
func (h *healthService) Watch(in *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ws := &watchStream{ServerStreamingServer: stream, ctx: ctx}
	go func() {
		select {
		case <-h.t.watchEnd:
			ws.ended = true
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(in, ws)
	if stream.Context().Err() != nil || !ws.endedByDrain(ctx) {
		return err
	}
	if ws.last != healthpb.HealthCheckResponse_NOT_SERVING {
		if err := stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
			return err
		}
	}
	return nil
}

// watchStream is a Watch stream with a context the drain ends, and the last
// status sent.
type watchStream struct {
	grpc.ServerStreamingServer[healthpb.HealthCheckResponse]
	ctx   context.Context
	last  healthpb.HealthCheckResponse_ServingStatus // written by the Watch goroutine only
	ended bool                                       // written before ctx is cancelled
}

// Context returns the stream's context, which also ends with the drain.
func (w *watchStream) Context() context.Context { return w.ctx }

// Send sends m and records its status.
func (w *watchStream) Send(m *healthpb.HealthCheckResponse) error {
	err := w.ServerStreamingServer.Send(m)
	if err == nil {
		w.last = m.Status
	}
	return err
}

// endedByDrain reports whether the drain ended the stream (ctx is done
// then, and ended was written before).
func (w *watchStream) endedByDrain(ctx context.Context) bool {
	return ctx.Err() != nil && w.ended
}
