package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// build compiles this example into a fresh temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "upgrade")
	gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// server is the first generation of the example, started by the test. Its
// successors are its children, then ours once their parent exits: the test
// process is a child subreaper, so every generation is reaped here and none
// escapes the test.
type server struct {
	bin    string
	cmd    *exec.Cmd
	first  chan struct{} // closed when the first generation was reaped
	lines  <-chan string
	seen   []string // lines read so far
	reaped map[int]syscall.WaitStatus
}

// startServer makes this process a subreaper, starts bin with args and
// ends every process running bin when the test ends.
func startServer(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = w, os.Stderr
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	s := &server{bin: bin, cmd: cmd, first: make(chan struct{}), lines: readLines(r), reaped: map[int]syscall.WaitStatus{}}
	go func() { cmd.Wait(); close(s.first) }()
	t.Cleanup(func() {
		for _, pid := range s.running() {
			syscall.Kill(pid, syscall.SIGKILL)
			s.reap(t, pid, 5*time.Second)
		}
		r.Close()
	})
	return s
}

// readLines delivers the lines of r; the channel closes at EOF (once every
// generation has exited, since they share the pipe).
func readLines(r io.ReadCloser) <-chan string {
	ch := make(chan string, 64)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// expect waits up to 60 s for a line starting with prefix and returns it; the
// line may have been read already (generations print concurrently).
func (s *server) expect(t *testing.T, prefix string) string {
	t.Helper()
	for _, line := range s.seen {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				t.Fatalf("server output ended before %q", prefix)
			}
			t.Logf("server: %s", line)
			s.seen = append(s.seen, line)
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("no %q from the server within 60 s", prefix)
		}
	}
}

// serving waits for "generation gen serving ... pid P" and returns P.
func (s *server) serving(t *testing.T, gen int) int {
	t.Helper()
	line := s.expect(t, fmt.Sprintf("generation %d serving ", gen))
	_, p, _ := strings.Cut(line, " pid ")
	pid, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("no pid in %q", line)
	}
	return pid
}

// running lists the live (not zombie) processes whose executable is the
// server's binary.
func (s *server) running() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == s.bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// reap waits up to timeout for pid, a process of ours or an orphan we
// inherited as subreaper, to exit, and returns its status.
func (s *server) reap(t *testing.T, pid int, timeout time.Duration) syscall.WaitStatus {
	t.Helper()
	if ws, ok := s.reaped[pid]; ok {
		return ws
	}
	if pid == s.cmd.Process.Pid {
		select {
		case <-s.first:
			ws := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
			s.reaped[pid] = ws
			return ws
		case <-time.After(timeout):
			t.Fatalf("pid %d did not exit within %s", pid, timeout)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		var ws syscall.WaitStatus
		// ECHILD: not (yet) ours, while its parent generation still runs.
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		if got == pid {
			s.reaped[pid] = ws
			return ws
		}
		if err != nil && !errors.Is(err, syscall.ECHILD) {
			t.Fatalf("wait4 %d: %v", pid, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not exit within %s", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
