package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyTimeout bounds a worker's start, up to its ready line (process start,
// listen, handoff); killTimeout bounds the wait for a killed process.
const (
	readyTimeout = 10 * time.Second
	killTimeout  = 5 * time.Second
)

// proc is a worker process and what it said on stdout.
type proc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	ready    chan struct{} // closed at the ready line
	switched chan struct{} // closed at the switched line
	exited   chan struct{} // closed once reaped

	mu       sync.Mutex
	exitedAt time.Time
	report   *workerReport // from the report line
	err      error         // from Wait
}

// startProc starts this program as a worker with env added to ours. The
// worker is killed if we die (Pdeathsig), and its stderr is ours.
func startProc(exe string, env []string, stderr io.Writer) (*proc, error) {
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), envRole+"="+roleWorker), env...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	p := &proc{cmd: cmd, stdin: in, ready: make(chan struct{}), switched: make(chan struct{}), exited: make(chan struct{})}
	go p.read(out)
	return p, nil
}

// read follows the worker's stdout until it closes, then reaps the worker.
func (p *proc) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	ready, switched := false, false
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, lineReady+" ") && !ready:
			ready = true
			close(p.ready)
		case line == lineSwitched && !switched:
			switched = true
			close(p.switched)
		case strings.HasPrefix(line, lineReport):
			var r workerReport
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, lineReport)), &r); err == nil {
				p.mu.Lock()
				p.report = &r
				p.mu.Unlock()
			}
		}
	}
	io.Copy(io.Discard, out)
	p.stdin.Close()
	err := p.cmd.Wait()
	p.mu.Lock()
	p.err, p.exitedAt = err, time.Now()
	p.mu.Unlock()
	close(p.exited)
}

// waitReady waits for the ready line.
func (p *proc) waitReady() error { return p.wait(p.ready, "ready") }

// takeOver tells a handoff successor to call Ready, and waits until it has
// taken over from its predecessor.
func (p *proc) takeOver() error {
	if _, err := io.WriteString(p.stdin, lineGo+"\n"); err != nil {
		return fmt.Errorf("worker %d: tell it to take over: %w", p.cmd.Process.Pid, err)
	}
	return p.wait(p.switched, "switched")
}

// wait waits, at most readyTimeout, for ch to close; else it kills the worker.
func (p *proc) wait(ch <-chan struct{}, what string) error {
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-p.exited:
		return fmt.Errorf("worker %d exited before it was %s: %v", p.cmd.Process.Pid, what, p.exitErr())
	case <-t.C:
		p.kill()
		return fmt.Errorf("worker %d not %s after %v", p.cmd.Process.Pid, what, readyTimeout)
	}
}

// stop sends SIGTERM (if signal is set) and waits for the worker to exit,
// at most stopTimeout plus a margin; then it kills it. It returns the
// worker's report.
func (p *proc) stop(signal bool) (*workerReport, error) {
	if signal {
		p.signal()
	}
	t := time.NewTimer(stopTimeout + 2*time.Second)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill()
		return nil, fmt.Errorf("worker %d still running %v after it was told to stop; killed", p.cmd.Process.Pid, stopTimeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.report == nil {
		return nil, fmt.Errorf("worker %d exited without a report: %v", p.cmd.Process.Pid, p.err)
	}
	if p.err != nil {
		return p.report, fmt.Errorf("worker %d: %v", p.cmd.Process.Pid, p.err)
	}
	return p.report, nil
}

// signal asks the worker to stop (SIGTERM).
func (p *proc) signal() { p.cmd.Process.Signal(syscall.SIGTERM) }

// exitTime is when the worker was seen to exit (zero before).
func (p *proc) exitTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt
}

// kill kills the worker if it still runs, and waits (bounded) until reaped.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Kill()
	t := time.NewTimer(killTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
	}
}

func (p *proc) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}
