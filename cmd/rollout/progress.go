package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/internal/load"
	"golang.org/x/sys/unix"
)

// progress writes a progress line on stderr: rewritten in place four times a
// second on a terminal, one line per strategy otherwise.
type progress struct {
	w        io.Writer
	tty      bool
	restarts atomic.Int64
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	var terr error
	if err := rc.Control(func(fd uintptr) { _, terr = unix.IoctlGetTermios(int(fd), unix.TCGETS) }); err != nil {
		return false
	}
	return terr == nil
}

// follow shows the run of strategy name until the returned func is called.
func (p *progress) follow(name string, cfg config, g *load.Generator) (stop func()) {
	p.restarts.Store(0)
	if !p.tty {
		fmt.Fprintf(p.w, "rollout: %s: %v of load, %d restarts...\n", name, cfg.Duration, cfg.Restarts)
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			req, failed := g.Count()
			el := time.Since(start)
			fmt.Fprintf(p.w, "\r%-8s %5.1fs/%.0fs  restarts %d/%d  requests %d  failed %d\x1b[K",
				name, el.Seconds(), cfg.Duration.Seconds(), p.restarts.Load(), cfg.Restarts, req, failed)
			select {
			case <-done:
				fmt.Fprint(p.w, "\r\x1b[K")
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}

// restarted records that restart i is done.
func (p *progress) restarted(i int) { p.restarts.Store(int64(i)) }

// done reports a finished strategy.
func (p *progress) done(o outcome) {
	state := "done"
	if o.Skipped != "" {
		fmt.Fprintf(p.w, "rollout: %s: skipped: %s\n", o.Name, o.Skipped)
		return
	}
	if len(o.Errors) > 0 {
		state = "FAILED: " + o.Errors[0]
	}
	fmt.Fprintf(p.w, "rollout: %s: %d restarts, %d requests, %d failed; %s\n", o.Name, o.Restarts, o.Requests, o.Failed, state)
}
