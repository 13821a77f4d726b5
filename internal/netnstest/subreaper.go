package netnstest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Subreaped is a process the test started, and the successors it starts:
// they are its children, then the test's once it exits (the test process is a
// child subreaper), so none escapes the test. Their stdout is one shared pipe
// that Expect reads line by line.
type Subreaped struct {
	Bin    string        // the executable every process of the tree runs
	Cmd    *exec.Cmd     // the first process
	first  chan struct{} // closed when the first process was reaped
	lines  <-chan string
	seen   []string // lines read so far
	reaped map[int]syscall.WaitStatus
}

// StartSubreaped makes this process a child subreaper, starts bin with args
// and env (added to ours), and ends every process running bin when tb ends
// (SIGKILL, then reaped within 10 s each).
func StartSubreaped(tb testing.TB, bin string, env []string, args ...string) *Subreaped {
	tb.Helper()
	return StartSubreapedFiles(tb, bin, nil, env, args...)
}

// StartSubreapedFiles is StartSubreaped with files passed to the first
// process as fd 3, 4, ... (as systemd passes activated sockets).
func StartSubreapedFiles(tb testing.TB, bin string, files []*os.File, env []string, args ...string) *Subreaped {
	tb.Helper()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		tb.Fatalf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = w, os.Stderr, append(os.Environ(), env...)
	cmd.ExtraFiles = files
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		tb.Fatal(err)
	}
	s := &Subreaped{Bin: bin, Cmd: cmd, first: make(chan struct{}), lines: readLines(r), reaped: map[int]syscall.WaitStatus{}}
	go func() { cmd.Wait(); close(s.first) }()
	tb.Cleanup(func() {
		for _, pid := range s.Running() {
			syscall.Kill(pid, syscall.SIGKILL)
			s.Reap(tb, pid, 10*time.Second)
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

// Expect waits up to 60 s for a line starting with prefix and returns it; the
// line may have been read already (processes print concurrently).
func (s *Subreaped) Expect(tb testing.TB, prefix string) string {
	tb.Helper()
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
				tb.Fatalf("server output ended before %q", prefix)
			}
			tb.Logf("server: %s", line)
			s.seen = append(s.seen, line)
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			tb.Fatalf("no %q from the server within 60 s", prefix)
		}
	}
}

// Running lists the live processes whose executable is Bin.
func (s *Subreaped) Running() []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == s.Bin {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Reap waits up to timeout for pid, the first process or an orphan inherited
// as subreaper, to exit, and returns its status; it fails tb if pid does not
// exit in time.
func (s *Subreaped) Reap(tb testing.TB, pid int, timeout time.Duration) syscall.WaitStatus {
	tb.Helper()
	if ws, ok := s.reaped[pid]; ok {
		return ws
	}
	if pid == s.Cmd.Process.Pid {
		select {
		case <-s.first:
			ws := s.Cmd.ProcessState.Sys().(syscall.WaitStatus)
			s.reaped[pid] = ws
			return ws
		case <-time.After(timeout):
			tb.Fatalf("pid %d did not exit within %s", pid, timeout)
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
			tb.Fatalf("wait4 %d: %v", pid, err)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pid %d did not exit within %s", pid, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
