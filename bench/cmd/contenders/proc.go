package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
)

const (
	sigHUP  = syscall.SIGHUP
	sigTERM = syscall.SIGTERM
)

// readyTimeout bounds the wait for a worker to serve, and exitTimeout the
// wait for one to exit after SIGTERM (beyond worker.ShutdownTimeout).
const (
	readyTimeout = 10 * time.Second
	exitTimeout  = worker.ShutdownTimeout + 5*time.Second
)

// proc is a worker process this run started, or adopted after its parent
// exited (tableflip's upgrades). Its ready lines come from the stdout pipe it
// shares with the processes it starts.
type proc struct {
	pid    int
	lines  <-chan int // pids of "ready" lines on the shared stdout
	exited chan struct{}
	err    error // set before exited closes
}

// startWorker starts the worker mode in a new process and waits until it
// serves. gen "" lets the worker use its pid as generation. files, if any,
// are passed as fds 3 and up, and the worker sets LISTEN_PID to its own pid
// first thing (worker.EnvListenPIDSelf), as if systemd had set it.
func (e *runEnv) startWorker(ctx context.Context, mode, gen string, env []string, files ...*os.File) (*proc, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(e.binFor(mode))
	cmd.Env = append(os.Environ(), worker.EnvRole+"="+mode, worker.EnvAddr+"="+e.addr, worker.EnvGen+"="+gen,
		worker.EnvDir+"="+e.dir, worker.EnvBPF+"="+e.bpfDir)
	if len(files) > 0 {
		cmd.ExtraFiles = files
		cmd.Env = append(cmd.Env, worker.EnvListenPIDSelf+"=1")
	}
	cmd.Env = append(cmd.Env, e.extra...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = w, e.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := startProc(cmd)
	w.Close()
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start worker %s: %w", mode, err)
	}
	lines := make(chan int, 16)
	e.readers.Add(1)
	go func() { defer e.readers.Done(); readReady(r, lines, &e.tls) }()
	p.lines = lines
	if _, err := p.nextReady(ctx); err != nil {
		p.kill()
		return nil, fmt.Errorf("worker %s: %w", mode, err)
	}
	return p, nil
}

// startProc starts cmd and waits for it in the background.
func startProc(cmd *exec.Cmd) (*proc, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	return p, nil
}

// readReady sends the pid of every "ready <pid> <gen>" line of r to lines,
// and adds the handshakes of every "tls <pid> <full> <resumed>" line to hs
// (and the pids and "cpu <pid> <ns>" of the workers to hs.cpu),
// until every writer has closed the pipe. A full channel drops lines: nobody
// waits for them.
func readReady(r *os.File, lines chan<- int, hs *handshakeCount) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if hs.quic.parse(f) {
			continue
		}
		if len(f) == 4 && f[0] == "tls" {
			full, ferr := strconv.ParseInt(f[2], 10, 64)
			resumed, rerr := strconv.ParseInt(f[3], 10, 64)
			if ferr == nil && rerr == nil {
				hs.Full.Add(full)
				hs.Resumed.Add(resumed)
			}
			continue
		}
		if len(f) == 3 && f[0] == "cpu" {
			pid, perr := strconv.Atoi(f[1])
			ns, nerr := strconv.ParseInt(f[2], 10, 64)
			if perr == nil && nerr == nil {
				hs.cpu.exited(pid, ns)
			}
			continue
		}
		if len(f) < 2 || f[0] != "ready" {
			continue
		}
		if pid, err := strconv.Atoi(f[1]); err == nil {
			hs.cpu.see(pid)
			select {
			case lines <- pid:
			default:
			}
		}
	}
	close(lines)
}

// nextReady waits for the next ready line, bounded by readyTimeout, and
// returns its pid.
func (p *proc) nextReady(ctx context.Context) (int, error) {
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case pid, ok := <-p.lines:
		if !ok {
			return 0, errors.New("exited before serving")
		}
		return pid, nil
	case <-t.C:
		return 0, fmt.Errorf("not ready after %v", readyTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// adopt returns the process pid, a child of p's that p's exit made ours (we
// are a child subreaper), sharing p's stdout.
func (p *proc) adopt(pid int) (*proc, error) {
	op, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("adopt %d: %w", pid, err)
	}
	q := &proc{pid: pid, lines: p.lines, exited: make(chan struct{})}
	go func() {
		_, err := op.Wait()
		q.err = err
		close(q.exited)
	}()
	return q, nil
}

func (p *proc) signal(sig syscall.Signal) error {
	if err := syscall.Kill(p.pid, sig); err != nil {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	return nil
}

// wait waits for p to exit, bounded by exitTimeout, and returns its error.
func (p *proc) wait(ctx context.Context) error {
	t := time.NewTimer(exitTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("worker %d: %w", p.pid, p.err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("worker %d: still running %v after it was told to stop", p.pid, exitTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop sends SIGTERM and waits for p to exit; it kills p if it does not.
func (p *proc) stop(ctx context.Context) error {
	if err := p.signal(sigTERM); err != nil {
		return err
	}
	err := p.wait(ctx)
	if err != nil {
		p.kill()
	}
	return err
}

// kill ends p with SIGKILL and waits for it (bounded).
func (p *proc) kill() {
	syscall.Kill(p.pid, syscall.SIGKILL)
	select {
	case <-p.exited:
	case <-time.After(exitTimeout):
	}
}
