package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// fleet is the servers of one strategy's run: a group of workers rolled one
// at a time, or one server upgraded in place (strategy.single).
type fleet struct {
	s      *strategy
	exe    string
	env    []string // strategy, address, handoff path
	stderr io.Writer
	live   []*proc // serving now, by slot
	next   *proc   // the next generation, started ahead of its restart
	all    []*proc // every process started, killed at the end
	gens   int     // generations started so far
}

// start starts n servers and waits until they are all ready.
func (f *fleet) start(n int) error {
	for slot := range n {
		p, err := f.spawn(slot)
		if err != nil {
			return err
		}
		if f.s.single {
			if err := p.takeOver(); err != nil {
				return err
			}
		}
		f.live = append(f.live, p)
	}
	return nil
}

// spawn starts the next generation, for slot, and waits for its ready line.
func (f *fleet) spawn(slot int) (*proc, error) {
	f.gens++
	p, err := startProc(f.exe, slices.Concat(f.env, []string{envGen + "=" + strconv.Itoa(f.gens), envSlot + "=" + strconv.Itoa(slot)}), f.stderr)
	if err != nil {
		return nil, err
	}
	f.all = append(f.all, p)
	if err := p.waitReady(); err != nil {
		return nil, err
	}
	return p, nil
}

// prepare starts the next generation, for slot, ahead of its restart, so
// that a restart's timing does not include a process start.
func (f *fleet) prepare(slot int) error {
	if f.next != nil {
		return nil
	}
	p, err := f.spawn(slot)
	f.next = p
	return err
}

// roll replaces the server in slot i%len(live) by the prepared generation:
// for a group, it stops the old worker (SIGTERM) now that the new one
// serves; for a single server, it tells the successor to take over, and the
// handoff stops the old one. mark is called at the moment the old one is
// told to stop. While the old one drains, the next generation is started
// if more is set. It returns the old server's report, with RollMS from the
// start of the restart until the old server exited.
func (f *fleet) roll(i int, mark func(), more bool) (*workerReport, error) {
	if len(f.live) == 0 {
		return nil, errors.New("no server to roll")
	}
	slot := i % len(f.live)
	if err := f.prepare(slot); err != nil {
		return nil, err
	}
	start := time.Now()
	old, nw := f.live[slot], f.next
	f.next = nil
	f.live[slot] = nw
	if f.s.single {
		if err := nw.takeOver(); err != nil {
			return nil, err
		}
		mark() // the successor's Ready returns once the predecessor stopped accepting
	} else {
		mark()
		old.signal()
	}
	var perr error
	if more {
		perr = f.prepare((i + 1) % len(f.live))
	}
	rep, err := old.stop(false)
	if rep != nil {
		rep.RollMS = float64(old.exitTime().Sub(start).Microseconds()) / 1000
	}
	if err == nil && perr != nil {
		err = fmt.Errorf("start the next generation: %w", perr)
	}
	return rep, err
}

// stop stops every live server (SIGTERM), then kills any process left. It
// returns the first error.
func (f *fleet) stop() error {
	var first error
	stopping := f.live
	if f.next != nil {
		stopping = append(stopping, f.next)
	}
	for _, p := range stopping {
		p.signal() // all at once: the load is over
	}
	for _, p := range stopping {
		if _, err := p.stop(false); err != nil && first == nil {
			first = fmt.Errorf("final stop: %w", err)
		}
	}
	f.live, f.next = nil, nil
	f.kill()
	return first
}

// kill kills every process still running.
func (f *fleet) kill() {
	for _, p := range f.all {
		p.kill()
	}
}
