package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

func init() {
	// A successor that receives the sockets, then hangs up before Ready and
	// exits 0: the serving generation counts a failed handoff.
	netnstest.RegisterHelper("quitter", func() {
		u, err := handoff.New(context.Background(), handoff.Config{Path: os.Getenv("SOCK")})
		if err != nil {
			fmt.Fprintln(os.Stderr, "quitter:", err)
			os.Exit(0)
		}
		u.Close()
	})
}

// upgradeJSON runs upgrade --json with args and returns the result and status.
func upgradeJSON(t *testing.T, args ...string) (upgradeResult, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := upgradeMain(context.Background(), append([]string{"--json"}, args...), &out, &errOut)
	t.Logf("zerodrop upgrade %q: exit %d\n%s%s", args, code, out.String(), errOut.String())
	var r upgradeResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("upgrade --json output %q: %v", out.String(), err)
	}
	return r, code
}

// buildExample compiles examples/upgrade into a temporary directory.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "upgrade-example")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(gocmd, "build", "-o", bin, "../../examples/upgrade")
	build.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// example is the first generation of examples/upgrade, started by the test.
type example struct {
	argv    []string
	pid     int   // the first generation
	orphans []int // later generations started by the example: ours once their parent exits
}

// startExample makes this process a child subreaper (a successor of the
// example becomes our child when its parent generation exits), starts the
// example's first generation and, when the test ends, kills every process
// running bin and reaps the generations in orphans.
func startExample(t *testing.T, bin, sock string) *example {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	e := &example{argv: []string{bin, "-addr", "127.0.0.1:8080", "-socket", sock, "-grace", "10s"}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e.argv[0], e.argv[1:]...)
	cmd.Stdout, cmd.Stderr = w, io.Discard // the drain reports
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	e.pid = cmd.Process.Pid
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		for _, pid := range running(bin) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		<-done
		for _, pid := range e.orphans {
			eventually(t, fmt.Sprintf("pid %d reaped", pid), func() bool {
				got, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
				return got == pid || err == syscall.ECHILD && !alive(pid)
			})
		}
		r.Close()
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	if !strings.HasPrefix(line, "generation 1 serving ") {
		t.Fatalf("first line of the example %q, %v; want generation 1 serving", line, err)
	}
	return e
}

// alive reports whether pid exists (zombies included).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// running lists the live (not zombie) processes running bin.
func running(bin string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if exe, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && exe == bin {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// generation asks the example which generation and pid answer.
func generation(t *testing.T) (int, int) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://127.0.0.1:8080/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	gen, err1 := strconv.Atoi(resp.Header.Get("X-Generation"))
	pid, err2 := strconv.Atoi(resp.Header.Get("X-PID"))
	if err1 != nil || err2 != nil {
		t.Fatalf("X-Generation %q, X-PID %q", resp.Header.Get("X-Generation"), resp.Header.Get("X-PID"))
	}
	return gen, pid
}

// Against examples/upgrade: --pid with SIGHUP, then -- CMD, each exit 0 with
// the generation one higher, the pid that now answers, and the old generation
// gone.
func TestUpgradeExample(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		e := startExample(t, buildExample(t), sock)

		r, code := upgradeJSON(t, "--socket", sock, "--pid", strconv.Itoa(e.pid), "--signal", "HUP", "--timeout", "60s")
		e.orphans = append(e.orphans, r.PID)
		gen, pid := answering(t, 2)
		if code != exitUpgraded || !r.OK || r.From != 1 || r.To != 2 || r.PID != pid || gen != 2 || r.Reason != "" {
			t.Errorf("exit %d, %+v; answering generation %d pid %d; want exit 0, ok, 1 -> 2 with that pid", code, r, gen, pid)
		}
		eventually(t, "generation 1 exited", func() bool { return !alive(e.pid) })

		var out, errOut bytes.Buffer
		args := append([]string{"--socket", sock, "--timeout", "60s", "--"}, e.argv...)
		code = upgradeMain(context.Background(), args, &out, &errOut)
		t.Logf("upgrade -- CMD: exit %d\n%s%s", code, out.String(), errOut.String())
		gen, pid = answering(t, 3)
		want := fmt.Sprintf("upgraded %s: generation 2 -> 3, pid %d, took ", sock, pid)
		if code != exitUpgraded || gen != 3 || !strings.HasPrefix(out.String(), want) {
			t.Errorf("exit %d, output %q, answering generation %d; want exit 0 and %q...", code, out.String(), gen, want)
		}
		eventually(t, "generation 2 exited", func() bool { return !alive(r.PID) || zombie(r.PID) })
		// Generation 3 is the child of upgradeMain's CMD; it reaps it when
		// the cleanup kills it.
	})
}

// answering waits up to 10 s until generation want answers (the old
// generation still accepts until it has seen its successor's Ready), and
// returns the generation and pid that answered last.
func answering(t *testing.T, want int) (gen, pid int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if gen, pid = generation(t); gen == want {
			return gen, pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	return gen, pid
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	_, rest, _ := strings.Cut(string(b), ") ")
	return err == nil && strings.HasPrefix(rest, "Z")
}

// Failures, each exit 1 with its reason: a start that does nothing (after
// --timeout), a CMD that fails, a successor that hangs up before Ready (the
// serving generation reports the failed handoff), and nobody serving.
func TestUpgradeFails(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		startExample(t, buildExample(t), sock)
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"nothing", []string{"--timeout", "1s", "--", "/bin/true"},
				"timeout: no newer generation served " + sock + " within 1s; generation 1 (pid "},
			{"wrong pid", []string{"--timeout", "1s", "--pid", strconv.Itoa(os.Getpid()), "--signal", "URG"}, // SIGURG: ignored
				"timeout: no newer generation served " + sock + " within 1s; generation 1 (pid "},
			{"cmd fails", []string{"--", "/bin/false"}, "/bin/false (pid "},
			{"hangs up", []string{"--", "/usr/bin/env", "ZERODROP_TEST_HELPER=quitter", "SOCK=" + sock, self, "-test.run=^$"},
				"the handoff failed ("},
		} {
			t0 := time.Now()
			r, code := upgradeJSON(t, append([]string{"--socket", sock}, tc.args...)...)
			took := time.Since(t0)
			if code != exitFailed || r.OK || r.Generation != 1 || !strings.HasPrefix(r.Reason, tc.want) {
				t.Errorf("%s: exit %d, %+v; want exit 1, generation 1, reason %q...", tc.name, code, r, tc.want)
			}
			if tc.name == "wrong pid" && !strings.HasSuffix(r.Reason, fmt.Sprintf("(--pid %d is not the process serving the socket)", os.Getpid())) {
				t.Errorf("%s: reason %q does not name the wrong pid", tc.name, r.Reason)
			}
			if (tc.name == "nothing" || tc.name == "wrong pid") && took < time.Second {
				t.Errorf("%s: returned after %s, before --timeout 1s", tc.name, took)
			}
			if gen, _ := generation(t); gen != 1 {
				t.Errorf("%s: generation %d answers, want 1", tc.name, gen)
			}
		}

		r, code := upgradeJSON(t, "--socket", filepath.Join(t.TempDir(), "none.sock"), "--", "/bin/true")
		if code != exitFailed || r.OK || !strings.HasPrefix(r.Reason, "nobody serves the handoff socket ") {
			t.Errorf("nobody serving: exit %d, %+v; want exit 1, nobody serves", code, r)
		}
	})
}

func TestParseUpgrade(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
		sig  syscall.Signal
	}{
		{[]string{"--socket", "s", "--pid", "7"}, true, syscall.SIGHUP},
		{[]string{"--socket", "s", "--pid", "7", "--signal", "SIGUSR2"}, true, syscall.SIGUSR2},
		{[]string{"--socket", "s", "--pid", "7", "--signal", "10"}, true, syscall.SIGUSR1},
		{[]string{"--socket", "@s", "--timeout", "5s", "--", "/bin/app", "-x"}, true, syscall.SIGHUP},
		{[]string{"--pid", "7"}, false, 0},
		{[]string{"--socket", "s"}, false, 0},
		{[]string{"--socket", "s", "--pid", "7", "--", "app"}, false, 0},
		{[]string{"--socket", "s", "--pid", "-3"}, false, 0},
		{[]string{"--socket", "s", "--pid", "7", "--signal", "NOPE"}, false, 0},
		{[]string{"--socket", "s", "--pid", "7", "--timeout", "0s"}, false, 0},
	} {
		o, err := parseUpgrade(tc.args, io.Discard)
		if (err == nil) != tc.ok || err == nil && o.signal != tc.sig {
			t.Errorf("parseUpgrade(%q) = %+v, %v; want ok=%v signal %v", tc.args, o, err, tc.ok, tc.sig)
		}
	}
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"upgrade", "--pid", "1"}, io.Discard, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "--socket is required") {
		t.Errorf("run upgrade without --socket: exit %d, %q; want 2 and the reason", code, errOut.String())
	}
}

// Example_upgrade is what systemd's ExecReload= runs: ask the main process
// to start its successor and exit 0 only once it serves. Compile-only: it
// needs a server on the socket.
func Example_upgrade() {
	pid := os.Getenv("MAINPID")
	code := run(context.Background(), []string{"upgrade", "--socket", "/run/app/handoff.sock", "--pid", pid, "--signal", "HUP", "--timeout", "2m"}, os.Stdout, os.Stderr)
	fmt.Println("exit status", code)
}
