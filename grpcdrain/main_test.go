package grpcdrain_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	grpcdrain "github.com/zerodrop/zerodrop/grpcdrain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("generation", generationMain)
	netnstest.RegisterHelper("tls-generation", tlsGenerationMain)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// generationMain is one generation of a gRPC service built on
// grpcdrain.Serve, on ZD_ADDR, upgraded through the handoff socket ZD_SOCK
// when set (else a reuseport worker). It prints "serving <generation>
// <pid> <addr>" once served and, when Serve returns, "report <generation>
// <cause> <method> <lost> <forced> <json>" (cause with '_' for spaces; lost:
// the listener's remainder; forced: the RPCs ended at the deadline).
func generationMain() {
	s := grpcdrain.New(grpcdrain.Config{})
	s.GRPC().RegisterService(&echoDesc, struct{}{})
	s.Health().SetServingStatus(svcName, healthpb.HealthCheckResponse_SERVING)
	rep, err := grpcdrain.Serve(context.Background(), s, []string{os.Getenv("ZD_ADDR")}, zerodrop.Config{
		Handoff:   handoff.Config{Path: os.Getenv("ZD_SOCK")},
		Successor: zerodrop.ReExec,
		Grace:     10 * time.Second,
		OnServing: func(gen uint64, addrs []net.Addr) { fmt.Printf("serving %d %d %s\n", gen, os.Getpid(), addrs[0]) },
	})
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	js, _ := json.Marshal(rep.Drain)
	d := rep.Drain.Listeners[0]
	fmt.Printf("report %d %s %s %d %d %s\n", rep.Generation, strings.ReplaceAll(rep.Cause, " ", "_"), d.Method,
		rep.Drain.Remainder(), len(rep.Drain.Forced), js)
}
