package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

// TestReload plays systemd for the unit's ExecReload=: the example runs with
// -store and -socket and a NOTIFY_SOCKET of the test's; "zerodrop upgrade
// --pid P --signal HUP" runs while clients open a new connection per
// request. It exits 0 once generation 2 serves; systemd hears RELOADING=1
// (with MONOTONIC_USEC) from the old process, then from the new one the same
// socket stored, MAINPID=<new pid> and READY=1; no request fails; the old
// process drains and exits 0; the new one's /metrics says zerodrop_generation 2,
// and it stops on SIGTERM.
func TestReload(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		bin, zd := build(t, ".", "zerodrop-example"), build(t, "../../cmd/zerodrop", "zerodrop")
		dir := t.TempDir()
		sd := netnstest.ListenNotify(t, filepath.Join(dir, "notify"))
		sock := filepath.Join(dir, "handoff.sock")
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		s := startServer(t, bin, []string{"NOTIFY_SOCKET=" + sd.Addr},
			"-store", "-addr", addr, "-socket", sock, "-grace", "20s")
		pid1 := s.Cmd.Process.Pid
		ino := expectStored(t, sd)
		sd.Expect(t, fmt.Sprintf("READY=1\nSTATUS=generation 1 serving %s (listened, inode %d)", addr, ino))
		l := startLoad(t, "http://"+addr+"/", 8)
		l.waitFor(t, "1", 50)

		before := monotonicUsec(t)
		res := runUpgrade(t, zd, "--socket", sock, "--pid", strconv.Itoa(pid1), "--signal", "HUP", "--timeout", "60s", "--json")
		var us int64
		msg, _ := sd.Recv(t)
		want := "RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=generation 1 starting generation 2"
		if _, err := fmt.Sscanf(msg, want, &us); err != nil || msg != fmt.Sprintf(want, us) || us < before || us > monotonicUsec(t) {
			t.Fatalf("first datagram of the reload %q (%v), want %q with MONOTONIC_USEC in [%d, now]", msg, err, want, before)
		}
		if got := expectStored(t, sd); got != ino {
			t.Fatalf("generation 2 stored inode %d, want %d", got, ino)
		}
		sd.Expect(t, fmt.Sprintf("MAINPID=%d", res.PID))
		sd.Expect(t, fmt.Sprintf("READY=1\nSTATUS=generation 2 serving %s (inherited, inode %d)", addr, ino))
		if res.From != 1 || res.To != 2 || res.PID == pid1 {
			t.Fatalf("upgrade said %+v, want generation 1 -> 2 in a new process", res)
		}
		l.waitFor(t, "2", 50)
		byGen, failed := l.stop()
		t.Logf("requests by generation %v, failed %d; upgrade took %.1f ms", byGen, len(failed), res.TookMS)
		if len(failed) != 0 {
			t.Errorf("failed requests %v, want none", failed)
		}

		s.Expect(t, "generation 1: successor ready, draining")
		if ws := s.Reap(t, pid1, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation 1: %v, want exit 0", ws)
		}
		if got := s.Running(); len(got) != 1 || got[0] != res.PID {
			t.Errorf("server processes %v, want only generation 2's %d", got, res.PID)
		}
		if q := onlyListener(t, portOf(t, addr)); q.Inode != ino {
			t.Errorf("listener inode %d after the reload, want %d", q.Inode, ino)
		}
		if body := metrics(t, addr); !strings.Contains(body, "\nzerodrop_generation 2\n") {
			t.Errorf("/metrics of generation 2 has no line \"zerodrop_generation 2\":\n%s", body)
		}
		syscall.Kill(res.PID, syscall.SIGTERM)
		sd.Expect(t, "STOPPING=1\nSTATUS=generation 2 draining")
		if ws := s.Reap(t, res.PID, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation 2 after SIGTERM: %v, want exit 0", ws)
		}
	})
}

// metrics GETs /metrics on addr, wants 200 and returns the body.
func metrics(t *testing.T, addr string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %v, want 200", addr, resp.StatusCode, err)
	}
	return string(b)
}

// upgradeResult is what "zerodrop upgrade --json" prints.
type upgradeResult struct {
	OK     bool    `json:"ok"`
	From   uint64  `json:"from"`
	To     uint64  `json:"to"`
	PID    int     `json:"pid"`
	TookMS float64 `json:"took_ms"`
	Reason string  `json:"reason"`
}

// runUpgrade runs zerodrop upgrade (bounded to 90 s) and wants exit 0.
func runUpgrade(t *testing.T, zd string, args ...string) upgradeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, zd, append([]string{"upgrade"}, args...)...)
	out, err := cmd.Output()
	var res upgradeResult
	if jerr := json.Unmarshal(out, &res); err != nil || jerr != nil || !res.OK {
		t.Fatalf("zerodrop upgrade: %v, %v; printed %s", err, jerr, out)
	}
	return res
}

// expectStored receives FDSTORE=1 for "http" with one fd, and returns its inode.
func expectStored(t *testing.T, sd *netnstest.NotifySocket) uint64 {
	t.Helper()
	msg, fds := sd.Recv(t)
	if msg != "FDSTORE=1\nFDNAME=http" || len(fds) != 1 {
		t.Fatalf("datagram %q with %d fds, want the listener stored", msg, len(fds))
	}
	return inodeOf(t, fds[0])
}

func monotonicUsec(t *testing.T) int64 {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano() / 1000
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, _ := strings.Cut(addr, ":")
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Example_run serves with reload through a handoff socket: SIGHUP starts the
// next generation, SIGTERM drains (compile-only: it serves until a signal).
func Example_run() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	c, err := parse([]string{"-store", "-addr", "127.0.0.1:8080", "-socket", "/run/zerodrop-example/handoff.sock"})
	if err == nil {
		err = run(ctx, c, hup, os.Stdout)
	}
	if err != nil {
		fmt.Println(err)
	}
}
