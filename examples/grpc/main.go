// Command grpc is a gRPC server that upgrades its own binary on SIGHUP
// without losing an RPC: the new process inherits the listening socket
// through package handoff (grpcdrain.Serve), and the old one drains (health
// NOT_SERVING, the lossless listener stop, GracefulStop bounded by -grace)
// and exits.
//
// # How to run it
//
// From the repository (or go run ./grpc from its examples module):
//
//	go run ./examples/grpc
//
// It serves the standard health service (grpc.health.v1) and
// zerodrop.example.Generation/Get, a method without generated code whose
// request and reply are raw bytes (content-subtype "raw"; the reply names
// the generation and the pid). With grpcurl, or any health client:
//
//	grpcurl -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check
//	kill -HUP $(cat /tmp/zerodrop-grpc-$(id -u)/grpc.pid)      # generation 2
//
// SIGINT or SIGTERM drains and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop"
	grpcdrain "github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/handoff"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("zerodrop-grpc-%d", os.Geteuid()))
	addr := flag.String("addr", "127.0.0.1:50051", "address to listen on (the first generation)")
	socket := flag.String("socket", filepath.Join(dir, "handoff.sock"), "handoff socket; its directory is created 0700, grpc.pid goes next to it")
	grace := flag.Duration("grace", 30*time.Second, "bound on the drain")
	flag.Parse()
	if err := run(*addr, *socket, *grace); err != nil {
		fmt.Fprintln(os.Stderr, "grpc example:", err)
		os.Exit(1)
	}
}

// run serves one generation: it inherits or creates the listener, starts a
// successor on SIGHUP, and drains once the successor is ready, or on
// SIGTERM or SIGINT.
func run(addr, socket string, grace time.Duration) error {
	dir := filepath.Dir(socket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	encoding.RegisterCodec(rawCodec{})
	var gen atomic.Uint64
	s := grpcdrain.New(grpcdrain.Config{})
	s.GRPC().RegisterService(generationService(&gen), struct{}{})
	s.Health().SetServingStatus("zerodrop.example.Generation", healthpb.HealthCheckResponse_SERVING)
	rep, err := grpcdrain.Serve(context.Background(), s, []string{addr}, zerodrop.Config{
		Handoff:   handoff.Config{Path: socket, PIDFile: filepath.Join(dir, "grpc.pid")},
		Grace:     grace,
		Successor: successor,
		OnListen:  func(g uint64, _ []net.Addr) { gen.Store(g) },
		OnServing: func(g uint64, addrs []net.Addr) {
			fmt.Printf("generation %d serving gRPC on %s pid %d\n", g, addrs[0], os.Getpid())
			if g == 1 {
				fmt.Printf("upgrade: kill -HUP $(cat %s)\n", filepath.Join(dir, "grpc.pid"))
			}
		},
	})
	if rep != nil && rep.Drain != nil {
		fmt.Printf("generation %d stopped (%s): %d RPCs completed in the drain, %d forced\n",
			rep.Generation, rep.Cause, rep.Drain.Completed, len(rep.Drain.Forced))
	}
	return err
}

// generationService is zerodrop.example.Generation, described by hand: Get
// answers "generation <n> pid <pid>" whatever it is sent.
func generationService(gen *atomic.Uint64) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "zerodrop.example.Generation",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Get",
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				return []byte(fmt.Sprintf("generation %d pid %d\n", gen.Load(), os.Getpid())), nil
			},
		}},
	}
}

// rawCodec ("raw") passes []byte messages through.
type rawCodec struct{}

func (rawCodec) Name() string { return "raw" }

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.([]byte); ok {
		return b, nil
	}
	return nil, fmt.Errorf("raw codec: cannot marshal %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("raw codec: cannot unmarshal into %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

// successor is the next generation with our arguments: this binary's path
// again, or, if it is gone (go run deletes its build when the first
// generation exits), the binary we run.
func successor() *exec.Cmd {
	bin, err := os.Executable()
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		bin = "/proc/self/exe"
	}
	cmd := exec.Command(bin, os.Args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd
}
