package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

func init() { netnstest.RegisterHelper("udpdns", udpDNSMain) }

// envUDPRounds raises the handoffs of TestUDPHandoffNoQueryLost (default 20).
const envUDPRounds = "ZERODROP_UDP_ROUNDS"

// udpDNSMain is one generation of a DNS-style service on the UDP socket
// "dns" (ZD_ADDR), upgraded through the handoff socket ZD_HANDOFF_PATH: it
// answers each datagram "q <id>" with "a <generation> <id>". On SIGHUP it
// starts its successor (the same command); once the successor is ready it
// stops reading (a read deadline in the past ends the read under way, and
// a datagram already read is answered), and prints "report <generation>
// <datagrams read>". It prints "ready <generation> <pid>" once Ready.
func udpDNSMain() {
	ctx := context.Background()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	u, err := New(ctx, Config{Path: os.Getenv(envPath)})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	pc, err := u.ListenPacket(ctx, "dns", "udp", os.Getenv(envAddr))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	gen := u.Generation()
	var read atomic.Int64
	done := make(chan error, 1)
	go func() { done <- answer(pc, gen, &read) }()
	if err := u.Ready(); err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("ready %d %d\n", gen, os.Getpid())
	for {
		select {
		case <-hup:
			cmd := exec.Command(os.Args[0], os.Args[1:]...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Start(); err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(1)
			}
			cmd.Process.Release()
			continue
		case <-u.Exit():
		}
		break
	}
	pc.SetReadDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		fmt.Printf("error read: %v\n", err)
	}
	pc.Close()
	u.Close()
	fmt.Printf("report %d %d\n", gen, read.Load())
}

// answer answers every datagram until a read fails.
func answer(pc net.PacketConn, gen uint64, read *atomic.Int64) error {
	buf := make([]byte, 512)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		read.Add(1)
		id, ok := strings.CutPrefix(string(buf[:n]), "q ")
		if !ok {
			continue
		}
		if _, err := pc.WriteTo(fmt.Appendf(nil, "a %d %s", gen, id), from); err != nil {
			return err
		}
	}
}

// TestUDPHandoffNoQueryLost runs a DNS-style UDP service through N
// handoffs (20, or ZERODROP_UDP_ROUNDS) while 8 clients send queries back
// to back, each waiting for its answer (no retry; 5 s is a loss): every
// query is answered exactly once, by some generation, every generation
// answers some, and the datagrams the generations report having read add
// up to the queries sent. The UDP socket is one kernel socket held by both
// generations during a handoff: a datagram queued when the predecessor
// stops reading is read by the successor.
func TestUDPHandoffNoQueryLost(t *testing.T) {
	n := 20
	if v := os.Getenv(envUDPRounds); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 1000 {
			t.Fatalf("%s=%q: want 1 to 1000", envUDPRounds, v)
		}
	}
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:5353"
		env := []string{"ZERODROP_TEST_HELPER=udpdns", envPath + "=" + filepath.Join(t.TempDir(), "handoff.sock"), envAddr + "=" + addr}
		s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
		pid := netnstest.Field(t, s.Expect(t, "ready 1 "), 2)
		q := startQueries(t, addr, 8)
		q.waitGen(t, 1, 20)
		reads := map[int]int{}
		for gen := 1; gen <= n; gen++ {
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			next := netnstest.Field(t, s.Expect(t, fmt.Sprintf("ready %d ", gen+1)), 2)
			reads[gen] = netnstest.Field(t, s.Expect(t, fmt.Sprintf("report %d ", gen)), 2)
			if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
				t.Errorf("generation %d exited with %v", gen, ws)
			}
			pid = next
			q.waitGen(t, gen+1, 20)
		}
		sent, answered, lost, byGen, firstErr := q.stop()
		syscall.Kill(pid, syscall.SIGHUP) // one more successor, so the last one reports its reads
		netnstest.Field(t, s.Expect(t, fmt.Sprintf("ready %d ", n+2)), 2)
		reads[n+1] = netnstest.Field(t, s.Expect(t, fmt.Sprintf("report %d ", n+1)), 2)
		total := 0
		for _, r := range reads {
			total += r
		}
		t.Logf("%d handoffs: %d queries sent, %d answered, %d lost; answered by generation %v; datagrams read by generation %v",
			n, sent, answered, lost, byGen, reads)
		if lost != 0 || answered != sent {
			t.Errorf("%d of %d queries lost, first: %v", lost, sent, firstErr)
		}
		if total != sent {
			t.Errorf("the generations read %d datagrams, the clients sent %d", total, sent)
		}
		for gen := 1; gen <= n+1; gen++ {
			if byGen[gen] == 0 {
				t.Errorf("generation %d answered no query", gen)
			}
		}
	})
}

// queries is the DNS-style load: clients that each send a query, wait for
// its answer, and send the next.
type queries struct {
	stopc chan struct{}
	wg    sync.WaitGroup

	mu       sync.Mutex
	sent     int
	answered int
	lost     int
	byGen    map[int]int
	firstErr error
}

func startQueries(t *testing.T, addr string, clients int) *queries {
	q := &queries{stopc: make(chan struct{}), byGen: map[int]int{}}
	for c := range clients {
		conn, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		q.wg.Add(1)
		go q.client(conn, c)
	}
	t.Cleanup(func() { q.stop() })
	return q
}

func (q *queries) client(conn net.Conn, c int) {
	defer q.wg.Done()
	defer conn.Close()
	buf := make([]byte, 512)
	deadline := time.Now().Add(10 * time.Minute)
	for id := 0; time.Now().Before(deadline); id++ {
		select {
		case <-q.stopc:
			return
		default:
		}
		want := fmt.Sprintf("%d.%d", c, id)
		q.mu.Lock()
		q.sent++
		q.mu.Unlock()
		gen, err := query(conn, buf, want)
		q.mu.Lock()
		if err != nil {
			q.lost++
			if q.firstErr == nil {
				q.firstErr = err
			}
		} else {
			q.answered++
			q.byGen[gen]++
		}
		q.mu.Unlock()
	}
}

// query sends "q <id>" and reads until the answer for id comes (5 s).
func query(conn net.Conn, buf []byte, id string) (gen int, err error) {
	if _, err := conn.Write([]byte("q " + id)); err != nil {
		return 0, err
	}
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		n, err := conn.Read(buf)
		if err != nil {
			return 0, fmt.Errorf("query %s: %w", id, err)
		}
		f := strings.Fields(string(buf[:n]))
		if len(f) == 3 && f[0] == "a" && f[2] == id {
			return strconv.Atoi(f[1])
		}
	}
}

// waitGen waits up to 30 s until generation gen answered n queries.
func (q *queries) waitGen(t *testing.T, gen, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		q.mu.Lock()
		got := q.byGen[gen]
		q.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("generation %d did not answer %d queries within 30 s", gen, n)
}

func (q *queries) stop() (sent, answered, lost int, byGen map[int]int, firstErr error) {
	select {
	case <-q.stopc:
	default:
		close(q.stopc)
	}
	q.wg.Wait()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sent, q.answered, q.lost, q.byGen, q.firstErr
}
