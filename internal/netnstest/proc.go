package netnstest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

const envHelper = "ZERODROP_TEST_HELPER"

var helpers = map[string]func(){}

// RegisterHelper names a function that StartHelper can run in a new process of
// the test binary. Call it from init or TestMain before HelperMain.
func RegisterHelper(name string, main func()) { helpers[name] = main }

// HelperMain runs the registered helper this process was started for, then
// exits; it returns at once in a normal test process. Call it first in TestMain.
func HelperMain() {
	name := os.Getenv(envHelper)
	if name == "" {
		return
	}
	f, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "netnstest: no helper %q\n", name)
		os.Exit(2)
	}
	f()
	os.Exit(0)
}

// Proc is a helper process started by StartHelper.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout *os.File // read end of the helper's stdout, for line protocols
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// HelperOptions configures StartHelper.
type HelperOptions struct {
	Env        []string            // extra KEY=VALUE pairs
	ExtraFiles []*os.File          // passed as fd 3, 4, ...
	Credential *syscall.Credential // run as another user
	Path       string              // binary to run; default os.Args[0]
	Args       []string            // extra arguments
	Stdin      io.Reader
	Setup      func(cmd *exec.Cmd) // last changes before start
}

// StartHelper starts the named helper in a new process of the test binary (in
// the caller's network namespace). The process is killed and reaped when the test
// ends, if it has not exited by then; its stderr goes to the test's stderr.
func StartHelper(tb testing.TB, name string, opts HelperOptions) *Proc {
	tb.Helper()
	path := opts.Path
	if path == "" {
		path = os.Args[0]
	}
	cmd := exec.Command(path, append([]string{"-test.run=^$"}, opts.Args...)...)
	cmd.Env = append(append(os.Environ(), envHelper+"="+name), opts.Env...)
	cmd.ExtraFiles = opts.ExtraFiles
	cmd.Stdin = opts.Stdin
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: opts.Credential}
	if opts.Setup != nil {
		opts.Setup(cmd)
	}
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout = w
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		tb.Fatalf("start helper %s: %v", name, err)
	}
	p := &Proc{Cmd: cmd, Stdout: r, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	tb.Cleanup(func() {
		p.Kill()
		r.Close()
	})
	return p
}

// ExecutableCopy copies the test binary into a directory every user can read and
// traverse, for helpers started under another UID (go test's build directory is
// private to its owner). The copy is removed when the test ends.
func ExecutableCopy(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "zerodrop-exe-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, filepath.Base(os.Args[0]))
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		tb.Fatal(err)
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Wait waits for the process to exit or ctx to end.
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error { return p.Cmd.Process.Signal(sig) }

// Kill kills the process (if it still runs) and waits up to 5 s for it.
func (p *Proc) Kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.Cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
	}
}

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
