package quicdrain_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	quicdrain "github.com/zerodrop/zerodrop/quicdrain"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

func init() { netnstest.RegisterHelper("h3steer", helperMain(h3steer)) }

// Environment of the "h3steer" helper (with envAddr, envDir, envCert,
// envKey of h3gen).
const (
	envGen = "ZD_GEN" // this process's generation
	envBPF = "ZD_BPF" // the bpf filesystem of the steering group
	// ZD_NOSTEER=1: the control, the same sockets without the program (the
	// kernel's reuseport hash spreads the datagrams).
	envNoSteer = "ZD_NOSTEER"
)

// h3steer is one steered generation of an HTTP/3 server (the "h3steer"
// helper), in a process of its own: a UDP socket of its own on the shared port, joined to the
// kernel's steering group once it serves. It answers each POST with "gen
// <generation> <body length>" and prints "ready <generation> <pid>". On
// SIGHUP it starts its successor (generation+1); on SIGTERM it shuts down
// (GOAWAY, drain), prints "report <generation> ..." (its quicdrain and
// steering counters) and exits.
func h3steer() error {
	ctx := context.Background()
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM)
	gen, err := strconv.ParseUint(os.Getenv(envGen), 10, 64)
	if err != nil {
		return err
	}
	srv, err := h3Server(func() uint64 { return gen }, &quic.Config{MaxIdleTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	g, err := quicdrain.ListenSteered(ctx, "udp4", os.Getenv(envAddr), gen, quicdrain.Config{Dir: os.Getenv(envDir)})
	if err != nil {
		return err
	}
	h3, err := quicdrain.ServeHTTP3(g, srv)
	if err != nil {
		g.Close()
		return err
	}
	if err := g.Start(ctx); err != nil {
		return err
	}
	var m *steer.QUICMember
	if os.Getenv(envNoSteer) == "" {
		sc := &steer.Config{Dir: os.Getenv(envBPF)}
		if m, err = sc.JoinQUIC(ctx, g, gen, steer.QUIC{CIDLen: quicdrain.CIDLen, GenOffset: quicdrain.CIDGenOffset}); err != nil {
			return err
		}
	}
	fmt.Printf("ready %d %d\n", gen, os.Getpid())
	for s := range sig {
		if s == syscall.SIGTERM {
			break
		}
		cmd := successorCmd(fmt.Sprintf("%s=%d", envGen, gen+1))
		if err := cmd.Start(); err != nil {
			return err
		}
		cmd.Process.Release()
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep := h3.Shutdown(sctx)
	var c steer.QUICCounters
	if m != nil {
		if c, err = m.Counters(); err != nil {
			return err
		}
		defer m.Close()
	}
	fmt.Printf("report %d %s malformed=%d unknown=%d byid=%d remembered=%d newest=%d fallback=%d\n",
		gen, reportJSON(rep), rep.Stats.Malformed, rep.Stats.Unknown, c.ByID, c.Remembered, c.Newest, c.Fallback)
	return nil
}

// steeredRestarts runs n restarts of steered generations (real processes,
// one UDP port) under HTTP/3 load. In each, the successor serves beside its
// predecessor until it answered 20 requests (fresh connections go to it,
// the predecessor's stay), then the predecessor drains; the test also sends
// the successor 3 datagrams too short to be QUIC and the predecessor one
// datagram with its generation byte and a forged tag.
func steeredRestarts(t *testing.T, n int, steered bool) (*h3load, []string) {
	f := newH3Files(t)
	env := append(f.env("h3steer"), envGen+"=1", envBPF+"="+netnstest.MountBPF(t, "0700"))
	if !steered {
		env = append(env, envNoSteer+"=1")
	}
	s, pid, l := startH3(t, f, env, 16, 4)
	junk, err := net.Dial("udp4", h3Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	var reports []string
	for gen := 1; gen <= n; gen++ {
		next := hup(t, s, pid, gen)
		before := l.answered(gen)
		l.waitGen(t, gen+1, 20)
		if steered && l.answered(gen) == before {
			t.Errorf("generation %d answered nothing while %d served beside it", gen, gen+1)
		}
		forged := make([]byte, 1+quicdrain.CIDLen+20)
		forged[0] = 0x40
		forged[1+quicdrain.CIDGenOffset] = byte(gen)
		for _, b := range [][]byte{{}, {0x40}, {0x40, 1, 2, 3}, forged} {
			if _, err := junk.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		reports = append(reports, s.Expect(t, fmt.Sprintf("report %d ", gen)))
		if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
			t.Errorf("generation %d exited with %v", gen, ws)
		}
		pid = next
		if steered {
			l.waitGen(t, gen+1, 40)
		}
	}
	l.stop()
	return l, reports
}

// TestSteeredRestartUnderLoad restarts an HTTP/3 server 5 times (or
// ZERODROP_QUIC_ROUNDS) with the kernel steering each datagram to the
// socket of its generation: not one request fails (no stateless reset, no
// handshake failure), no generation forwards or receives a forwarded
// datagram, none reads a datagram of another generation's connection (its
// quicdrain counters would count it Unknown: only the forged one, and late
// datagrams of a generation already closed, which the kernel counts as
// Fallback, may), and the too-short datagrams all reached the newest, which
// dropped them. Some ClientHellos (Go's default X25519MLKEM768 key share)
// must have taken two Initial datagrams, the second routed by the program's
// memory of the client.
func TestSteeredRestartUnderLoad(t *testing.T) {
	n := 5
	if os.Getenv(envRounds) != "" {
		n = rounds(t)
	}
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		start := time.Now()
		l, reports := steeredRestarts(t, n, true)
		t.Logf("%d steered restarts in %v: %s", n, time.Since(start).Round(time.Millisecond), l)
		var remembered int64
		for i, r := range reports {
			t.Log(r)
			remembered += reportValue(t, r, "remembered")
			// Besides the forged datagram, a generation may read only
			// datagrams the kernel could not place (Fallback): the too-short
			// ones, and late ones of a generation that had closed.
			junk := int64(3)
			if i == 0 {
				junk = 0
			}
			fallback := reportValue(t, r, "fallback")
			want := map[string]int64{"forwarded": 0, "received": 0, "forced": 0, "handedover": 0,
				"malformed": junk, "unknown": 1 + fallback - junk}
			for k, v := range want {
				if got := reportValue(t, r, k); got != v {
					t.Errorf("generation %d: %s=%d, want %d", i+1, k, got, v)
				}
			}
			if reportValue(t, r, "byid") == 0 || reportValue(t, r, "own") == 0 {
				t.Errorf("generation %d: the kernel steered nothing to it by connection ID", i+1)
			}
		}
		if l.failed != 0 {
			t.Errorf("%s", l)
		}
		l.checkHandled(t, reports)
		if remembered == 0 {
			t.Errorf("no ClientHello took two Initial datagrams routed by the program's memory of its client")
		}
	})
}

// TestUnsteeredRestartLoses is the control: the same generations, each on a
// socket of its own, without the program. The kernel's reuseport hash moves
// connections to the successor's socket as it joins: it reads datagrams of
// connections that are not its own and drops them, so requests fail and
// the predecessor's drain is forced; else the test could not see what
// steering prevents.
func TestUnsteeredRestartLoses(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		l, reports := steeredRestarts(t, 1, false)
		for _, r := range reports {
			t.Log(r)
		}
		// The connections the hash moved stall (the successor drops their
		// datagrams, or refuses them) until the client's idle timeout: their
		// requests fail. The predecessor's drain is forced when it still
		// holds such a connection at its deadline; beside a CPU hog the
		// clients' idle timeouts (or CONNECTION_REFUSED) came first, 16
		// failed and nothing forced, which is the same loss.
		t.Logf("without steering, 1 restart: %s", l)
		if l.failed == 0 {
			t.Errorf("without the program no request failed: %s; report %s", l, reports[0])
		}
	})
}

// answered returns how many requests generation gen answered so far.
func (l *h3load) answered(gen int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byGen[gen]
}

// TestSteeredOldGenerationCrashed kills (SIGKILL) a generation that still
// has connections, once its successor serves. The kernel then gives their
// datagrams to the newest (Fallback), which drops them as not its own
// (Unknown) and sends no stateless reset: the requests in flight on the
// dead generation fail at the client's idle timeout, without a reset, and
// their clients reconnect, to the newest.
func TestSteeredOldGenerationCrashed(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		f := newH3Files(t)
		env := append(f.env("h3steer"), envGen+"=1", envBPF+"="+netnstest.MountBPF(t, "0700"))
		s, pid, l := startH3(t, f, env, 8, 2)
		next := hup(t, s, pid, 1)
		l.waitGen(t, 2, 20)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		s.Reap(t, pid, 30*time.Second)
		// The dead generation's requests fail at the clients' idle timeout
		// (10 s); then they reconnect, to the newest.
		deadline := time.Now().Add(40 * time.Second)
		for l.failures() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if l.failures() == 0 {
			t.Fatalf("no request of the dead generation failed within 40 s: %s", l)
		}
		l.waitGen(t, 2, l.answered(2)+100)
		l.stop()
		if err := syscall.Kill(next, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := s.Expect(t, "report 2 ")
		s.Reap(t, next, 30*time.Second)
		t.Logf("%s; %s", l, r)
		if l.resets != 0 || l.handshake != 0 {
			t.Errorf("stateless resets or handshake failures: %s", l)
		}
		fallback, unknown := reportValue(t, r, "fallback"), reportValue(t, r, "unknown")
		if fallback == 0 || unknown != fallback || reportValue(t, r, "malformed") != 0 {
			t.Errorf("report %q: want the dead generation's datagrams steered to the newest (fallback > 0) and all dropped (unknown = fallback)", r)
		}
	})
}

// failures returns how many requests failed so far.
func (l *h3load) failures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}
