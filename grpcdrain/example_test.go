package grpcdrain_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/zerodrop/zerodrop"
	grpcdrain "github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A Server on one listener: the health service answers SERVING, then
// Shutdown drains it and reports.
func Example() {
	ctx := context.Background()
	s := grpcdrain.New(grpcdrain.Config{})
	// Register your services on s.GRPC() here.
	l, err := reuseport.Listen(ctx, "tcp", "127.0.0.1:0") // IPPROTO_TCP: drain refuses MPTCP
	if err != nil {
		log.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()

	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	r, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("health:", r.Status)

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := s.Shutdown(sctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listeners:", len(rep.Listeners), "lost:", rep.Remainder(), "forced:", len(rep.Forced))
	fmt.Println("serve:", <-served)
	// Output:
	// health: SERVING
	// listeners: 1 lost: 0 forced: 0
	// serve: <nil>
}

// One generation of a gRPC service upgraded through handoff: SIGHUP starts
// the next generation, which inherits the listening socket; this one drains
// once it is ready, or on SIGTERM. (Compile-only: it waits for signals.)
func ExampleServe() {
	s := grpcdrain.New(grpcdrain.Config{})
	// Register your services on s.GRPC() here.
	rep, err := grpcdrain.Serve(context.Background(), s, []string{"127.0.0.1:50051"}, zerodrop.Config{
		Handoff:   handoff.Config{Path: "/run/myservice/handoff.sock"},
		Successor: zerodrop.ReExec, // SIGHUP starts this executable again
		Delay:     5 * time.Second, // health answers NOT_SERVING meanwhile (not after a handoff)
		Logger:    zap.NewExample(),
	})
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	log.Printf("generation %d stopped (%s): %d RPCs completed during the drain", rep.Generation, rep.Cause, rep.Drain.Completed)
}
