package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// exampleUpgrades is how many times TestUpgradeGRPC upgrades the example.
const exampleUpgrades = 5

// The built example upgraded five times by SIGHUP, then stopped by SIGTERM,
// while real grpc-go clients call it in loops: health Check and
// zerodrop.example.Generation/Get on two shared client connections, and Get
// on a new client connection per call. No RPC fails (an Unavailable is a
// failure), every generation answers Get, every process exits 0, and the
// kernel refuses or drops no connection.
func TestUpgradeGRPC(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		bin := netnstest.Build(t, ".", "grpc")
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		// A fixed port is safe: the namespace is the test's own.
		const addr = "127.0.0.1:50051"
		s := netnstest.StartSubreaped(t, bin, nil, "-addr", addr, "-socket", sock, "-grace", "20s")
		pids := []int{s.ExpectPID(t, "generation 1 serving gRPC on ")}
		s.Expect(t, "upgrade: kill -HUP $(cat "+filepath.Join(filepath.Dir(sock), "grpc.pid")+")")
		counters := netnstest.Snapshot(t)

		l := startRPCs(t, addr, 2, 6, 2, 1)
		l.waitFor(t, 1, 50)
		const last = exampleUpgrades + 1
		for gen := 2; gen <= last; gen++ {
			pids = s.Upgrade(t, pids, fmt.Sprintf("generation %d serving gRPC on ", gen),
				fmt.Sprintf("generation %d stopped (successor ready): ", gen-1))
			l.waitFor(t, gen, 50)
		}
		res := l.stop()
		t.Logf("Generation/Get: %d answered, by generation %v; health Check: %v; failed %v",
			res.gets, res.byGen, res.health, res.failed)
		if len(res.failed) != 0 {
			t.Errorf("failed RPCs %v, want none", res.failed)
		}
		for g := 1; g <= last; g++ {
			if res.byGen[g] == 0 {
				t.Errorf("generation %d answered no Get", g)
			}
		}
		if res.health[healthpb.HealthCheckResponse_SERVING.String()] == 0 {
			t.Errorf("health Check answered %v, want SERVING among them", res.health)
		}
		s.StopLast(t, pids, fmt.Sprintf("generation %d stopped (terminated): ", last))
		// Tcp.OutRsts is logged: a client connection closed with the
		// server's last frames unread resets, and no RPC is lost to it (the
		// clients count every failure).
		counters.CheckConnects(t)
	})
}

// rpcLoad is grpc-go clients calling the example in loops until stopped,
// for at most 5 minutes and 1e6 calls each.
type rpcLoad struct {
	ccs     []*grpc.ClientConn
	stopped atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	rpcCounts
}

// rpcCounts is what an rpcLoad counted.
type rpcCounts struct {
	gets   int
	byGen  map[int]int    // Get answers by the generation in them
	health map[string]int // Check answers by status
	failed map[string]int // by "method: code: message"
}

// startRPCs dials conns client connections to addr, spreads gets Get
// callers and checks health Check callers over them, and starts fresh
// callers that make each Get on a client connection of their own.
func startRPCs(t *testing.T, addr string, conns, gets, checks, fresh int) *rpcLoad {
	encoding.RegisterCodec(rawCodec{}) // the client side of the example's "raw" content-subtype
	l := &rpcLoad{rpcCounts: rpcCounts{byGen: map[int]int{}, health: map[string]int{}, failed: map[string]int{}}}
	for range conns {
		cc, err := dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		l.ccs = append(l.ccs, cc)
	}
	t.Cleanup(func() { l.stop() })
	deadline := time.Now().Add(5 * time.Minute)
	loop := func(call func(ctx context.Context)) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; i < 1e6 && !l.stopped.Load() && time.Now().Before(deadline); i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				call(ctx)
				cancel()
			}
		}()
	}
	for i := range gets {
		cc := l.ccs[i%conns]
		loop(func(ctx context.Context) { l.get(ctx, cc) })
	}
	for i := range checks {
		hc := healthpb.NewHealthClient(l.ccs[i%conns])
		loop(func(ctx context.Context) { l.check(ctx, hc) })
	}
	for range fresh {
		loop(func(ctx context.Context) {
			cc, err := dial(addr)
			if err != nil {
				l.fail("Get", err)
				return
			}
			l.get(ctx, cc)
			cc.Close()
		})
	}
	return l
}

// dial makes a client connection to addr, without TLS.
func dial(addr string) (*grpc.ClientConn, error) {
	return grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// get calls Generation/Get once on cc and counts the answer.
func (l *rpcLoad) get(ctx context.Context, cc *grpc.ClientConn) {
	var out []byte
	err := cc.Invoke(ctx, "/zerodrop.example.Generation/Get", []byte("x"), &out, grpc.CallContentSubtype("raw"))
	var gen, pid int
	if err == nil {
		if n, _ := fmt.Sscanf(string(out), "generation %d pid %d\n", &gen, &pid); n != 2 {
			err = fmt.Errorf("reply %q", out)
		}
	}
	if err != nil {
		l.fail("Get", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gets++
	l.byGen[gen]++
}

// check calls health Check once for the example's service and counts the
// status answered.
func (l *rpcLoad) check(ctx context.Context, hc healthpb.HealthClient) {
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "zerodrop.example.Generation"})
	if err != nil {
		l.fail("Check", err)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.health[resp.GetStatus().String()]++
}

// fail counts a failed call of method by its error: the status code and
// message of an RPC error.
func (l *rpcLoad) fail(method string, err error) {
	what := err.Error()
	if st, ok := status.FromError(err); ok {
		what = st.Code().String() + ": " + st.Message()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed[method+": "+what]++
}

// waitFor waits up to 60 s until generation gen has answered n Gets.
func (l *rpcLoad) waitFor(t *testing.T, gen, n int) {
	t.Helper()
	netnstest.WaitCount(t, fmt.Sprintf("Gets generation %d answered", gen), n, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.byGen[gen]
	})
}

// stop ends the load (safe twice), closes its client connections and
// returns the counts.
func (l *rpcLoad) stop() rpcCounts {
	if !l.stopped.Swap(true) {
		l.wg.Wait()
		for _, cc := range l.ccs {
			if cc != nil {
				cc.Close()
			}
		}
	}
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rpcCounts
}
