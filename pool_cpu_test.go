package zerodrop_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// TestPoolPerCPURolls composes, through the public API only, what a pool
// worker can have: each of 4 workers opens its own listeners with
// reuseport.ListenPerCPU (one per CPU, SO_INCOMING_CPU set), serves each
// with a drain.Server that steps out of the group's pick at its stop
// (drain.Options.StepOut: no eBPF, tcp_migrate_req=0), and joins the pool
// directory (handoff.JoinPool) so that at its stop its keep-alive
// connections go to a sibling (drain.Server.HandOver, handoff.Pool.PassConns).
// 64 sparse keep-alive clients post non-retryable requests; 10 rolls (start
// a replacement, SIGTERM the worker it replaces): no request fails and no
// client connects again because of the server. It logs each roll's duration (the replacement's
// start and the stop, as bench/cmd/contenders measures a restart).
func TestPoolPerCPURolls(t *testing.T) {
	const clients, workers, rolls = 64, 4, 10
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		netnstest.RequireSupport(t, reuseport.CPUPreference(), reuseport.ErrNoCPUPreference)
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:8080"
		env := []string{"ZERODROP_TEST_HELPER=cpuworker", "ZD_ADDR=" + addr, "ZD_POOL=" + t.TempDir()}
		type worker struct {
			s   *netnstest.Subreaped
			pid int
		}
		start := func() worker {
			s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
			return worker{s, servingPID(t, s.Expect(t, "serving cpu "))}
		}
		handedOver, idleClosed := 0, 0
		stop := func(w worker, last bool) {
			if err := syscall.Kill(w.pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			rep := strings.Fields(w.s.Expect(t, "report cpu "))
			if ws := w.s.Reap(t, w.pid, 30*time.Second); ws.ExitStatus() != 0 {
				t.Errorf("worker %d exited with %v", w.pid, ws)
			}
			if len(rep) < 6 || rep[2] != strconv.Itoa(w.pid) {
				t.Fatalf("report %v", rep)
			}
			n, _ := strconv.Atoi(rep[3])
			handedOver += n
			n, _ = strconv.Atoi(rep[4])
			idleClosed += n
			if !last && rep[5] != string(drain.MethodStepOut) { // the last has no sibling to cover its CPU
				t.Errorf("worker %d stopped its listeners by %s, want %s", w.pid, rep[5], drain.MethodStepOut)
			}
		}
		slots := make([]worker, workers)
		for i := range slots {
			slots[i] = start()
		}
		p := startKAPool(t, "http://"+addr+"/", clients)
		waitAnswered(t, 0, 2*clients, p.total)
		var took []time.Duration
		for r := range rolls {
			i := r % len(slots)
			t0 := time.Now()
			next := start()
			stop(slots[i], false)
			took = append(took, time.Since(t0))
			slots[i] = next
			waitAnswered(t, next.pid, p.total()+clients/4, p.total)
		}
		failed, byClass, first := p.stop()
		for i, w := range slots {
			stop(w, i == len(slots)-1)
		}
		slices.Sort(took)
		t.Logf("%d clients, %d rolls of %d ListenPerCPU workers: roll median %v (min %v, max %v); %d failed %v (first: %v); %d dials, %d connections closed by the server; handed over %d, idle closed %d",
			clients, rolls, workers, took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond),
			failed, byClass, first, p.dials.Load(), p.serverClosed.Load(), handedOver, idleClosed)
		if failed > 0 {
			t.Errorf("%d requests failed %v (first: %v), want 0", failed, byClass, first)
		}
		// No client may connect again because of the server: it closed none
		// and asked none to close. A Transport also abandons, on its own, a
		// connection whose request write it has not seen complete within
		// 50 ms of the response (net/http's maxWriteWaitBeforeConnReuse: its
		// writeLoop starved of CPU: 1 of 64 clients at load 12 with -race, 9
		// at load 25), and dials again: such dials are the clients' own.
		d, own := p.dials.Load(), p.clientClosed.Load()
		if p.serverClosed.Load() != 0 || p.askedClose.Load() != 0 || d != clients+own {
			t.Errorf("%d dials for %d clients, %d connections closed by the server, %d by the clients, %d responses said Connection: close: want no reconnect the server caused",
				d, clients, p.serverClosed.Load(), own, p.askedClose.Load())
		}
		if handedOver == 0 {
			t.Error("no connection handed over")
		}
	})
}

// cpuWorkerMain is the "cpuworker" helper: a pool worker built by hand
// (ListenPerCPU, a drain.Server with StepOut per listener, handoff.JoinPool)
// that answers with its pid, prints "serving cpu <pid>", and at SIGTERM
// drains, passing its keep-alive connections to a sibling, then prints
// "report cpu <pid> <handed over> <idle closed> <method>".
func cpuWorkerMain() {
	if err := cpuWorker(); err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
}

func cpuWorker() error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	cfg := reuseport.Config{Migration: reuseport.MigrationIgnore}
	lns, err := cfg.ListenPerCPU(ctx, "tcp", os.Getenv("ZD_ADDR"))
	if err != nil {
		return err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintf(w, "%d\n", os.Getpid()) })
	servers := make([]*drain.Server, len(lns))
	for i := range servers {
		servers[i] = &drain.Server{HTTP: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}, Listener: drain.Options{StepOut: true}}
	}
	var mu sync.Mutex
	next := 0
	pool, err := handoff.JoinPool(os.Getenv("ZD_POOL"), handoff.ConnsConfig{Addrs: map[string]net.Addr{"http": lns[0].Addr()}},
		map[string]func(handoff.PassedConn){"http": func(pc handoff.PassedConn) {
			mu.Lock()
			s := servers[next%len(servers)]
			next++
			mu.Unlock()
			s.ServeConn(pc.Conn, pc.State)
		}})
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return err
	}
	defer pool.Close()
	errc := make(chan error, len(servers))
	for i, s := range servers {
		s.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
			pcs := make([]handoff.PassedConn, len(conns))
			for j, d := range conns {
				pcs[j] = handoff.PassedConn{Conn: d.Conn, State: d.Unread}
			}
			return pool.PassConns(ctx, "http", pcs)
		}
		go func() { errc <- s.Serve(lns[i]) }()
	}
	fmt.Printf("serving cpu %d\n", os.Getpid())
	<-ctx.Done()
	pool.StopListening() // siblings stopping now pick another
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	reps := make([]*drain.Report, len(servers))
	errs := make([]error, 2*len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = s.Shutdown(sctx)
		}()
	}
	wg.Wait()
	handed, idle, method := 0, 0, drain.MethodStepOut
	for i, r := range reps {
		if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
			errs[len(servers)+i] = err
		}
		if r == nil {
			continue
		}
		if r.Method != drain.MethodStepOut {
			method = r.Method
		}
		if r.HTTP != nil {
			handed += r.HTTP.HandedOver
			idle += r.HTTP.IdleClosed
		}
	}
	fmt.Printf("report cpu %d %d %d %s\n", os.Getpid(), handed, idle, method)
	return errors.Join(errs...)
}
