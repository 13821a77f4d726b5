package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// readyTimeout bounds how long a new worker may take to listen.
const readyTimeout = 10 * time.Second

// worker is one worker process, as the supervisor sees it.
type worker struct {
	slot, gen int
	cmd       *exec.Cmd
	stopping  bool          // the supervisor asked it to stop; touched by the supervisor only
	done      chan struct{} // closed once the process has exited and been reaped
	err       error         // its exit status, valid after done
}

// supervisor keeps one worker per slot and rolls them on demand. All its
// fields belong to the goroutine that calls run.
type supervisor struct {
	c              config
	exe            string
	stdout, stderr io.Writer
	gen            int
	slots          []*worker
	exited         chan *worker // every worker sends itself here once, when it exits
}

func newSupervisor(c config, stdout, stderr io.Writer) (*supervisor, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find my executable: %w", err)
	}
	return &supervisor{c: c, exe: exe, stdout: stdout, stderr: stderr, gen: 1,
		slots: make([]*worker, c.workers), exited: make(chan *worker, 4*c.workers)}, nil
}

// run starts the workers and supervises them until ctx ends, then stops them.
func (s *supervisor) run(ctx context.Context, hup <-chan os.Signal) error {
	defer s.stopAll()
	for i := range s.slots {
		w, err := s.start(i)
		if err != nil {
			return err
		}
		s.slots[i] = w
	}
	s.announce("serving")
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			s.roll(ctx)
		case w := <-s.exited:
			if w.stopping || s.slots[w.slot] != w {
				continue
			}
			s.logf("worker %d (pid %d) exited on its own (%v); starting another", w.slot, w.cmd.Process.Pid, w.err)
			nw, err := s.start(w.slot)
			if err != nil {
				return err
			}
			s.slots[w.slot] = nw
		}
	}
}

// roll replaces the workers one at a time: start the new one, wait until it
// listens, stop the old one, wait until it has exited. A new worker that
// fails to start stops the roll; the workers still running keep serving.
func (s *supervisor) roll(ctx context.Context) {
	s.gen++
	for i, old := range s.slots {
		if ctx.Err() != nil {
			return
		}
		nw, err := s.start(i)
		if err != nil {
			s.logf("roll to generation %d stopped at worker %d: %v; the running workers keep serving", s.gen, i, err)
			return
		}
		s.slots[i] = nw
		s.stop(old)
	}
	s.announce("rolled to")
}

// start runs a worker of the current generation for slot and waits until it
// listens (it closes the pipe it got as fd 3 after writing "ready").
func (s *supervisor) start(slot int) (*worker, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(s.exe)
	cmd.Env = append(os.Environ(), s.c.env(slot, s.gen)...)
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	cmd.ExtraFiles = []*os.File{w}
	// Own process group: Ctrl-C reaches the supervisor only, which stops the
	// workers in order. If the supervisor dies, its workers get SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("start worker %d: %w", slot, err)
	}
	wk := &worker{slot: slot, gen: s.gen, cmd: cmd, done: make(chan struct{})}
	go func() {
		wk.err = cmd.Wait()
		close(wk.done)
		s.exited <- wk
	}()
	r.SetReadDeadline(time.Now().Add(readyTimeout))
	msg, err := io.ReadAll(r)
	if string(msg) != "ready\n" {
		wk.stopping = true
		s.stop(wk)
		return nil, fmt.Errorf("worker %d of generation %d did not get ready (%q, %v): %v", slot, s.gen, msg, err, wk.err)
	}
	return wk, nil
}

// stop sends SIGTERM and waits until the worker has exited: at most its
// grace period and 5 s more, then it is killed.
func (s *supervisor) stop(w *worker) {
	w.stopping = true
	w.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(s.c.grace + 5*time.Second)
	defer t.Stop()
	select {
	case <-w.done:
	case <-t.C:
		s.logf("worker %d (pid %d) did not stop in time; killing it", w.slot, w.cmd.Process.Pid)
		w.cmd.Process.Kill()
		<-w.done
	}
	if w.err != nil {
		s.logf("worker %d (pid %d) stopped: %v", w.slot, w.cmd.Process.Pid, w.err)
	}
}

// stopAll stops every worker at once.
func (s *supervisor) stopAll() {
	for _, w := range s.slots {
		if w != nil {
			w.stopping = true
			w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, w := range s.slots {
		if w != nil {
			s.stop(w)
		}
	}
}

// announce prints one line about the running workers on stdout.
func (s *supervisor) announce(what string) {
	pids := make([]string, len(s.slots))
	for i, w := range s.slots {
		pids[i] = strconv.Itoa(w.cmd.Process.Pid)
	}
	fmt.Fprintf(s.stdout, "%s generation %d: %d workers on %s, pids %v\n", what, s.gen, len(s.slots), s.c.addr, pids)
}

func (s *supervisor) logf(format string, args ...any) {
	fmt.Fprintf(s.stderr, "workers: "+format+"\n", args...)
}
