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

// build compiles pkg (relative to this directory) into a fresh temporary
// directory as name.
func build(t *testing.T, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// server is the example's first process, started by the test, and the
// successors it starts: they are its children, then ours once it exits (the
// test process is a child subreaper), so none escapes the test.
type server struct {
	bin    string
	cmd    *exec.Cmd
	first  chan struct{} // closed when the first process was reaped
	lines  <-chan string
	seen   []string
	reaped map[int]syscall.WaitStatus
}

// startServer makes this process a subreaper, starts bin with args and env
// (added to ours), and ends every process running bin when the test ends.
func startServer(t *testing.T, bin string, env []string, args ...string) *server {
	t.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = w, os.Stderr, append(os.Environ(), env...)
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
			s.reap(t, pid, 10*time.Second)
		}
		if _, ok := s.reaped[cmd.Process.Pid]; !ok {
			cmd.Process.Kill()
			<-s.first
		}
		r.Close()
	})
	return s
}

// readLines delivers the lines of r; the channel closes at EOF (once every
// process sharing the pipe has exited).
func readLines(r io.Reader) <-chan string {
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
// line may have been read already (processes print concurrently).
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

// running lists the live processes whose executable is the server's binary.
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

// reap waits up to timeout for pid, the first process or an orphan we
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
		// ECHILD: not (yet) ours, while its parent still runs.
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
