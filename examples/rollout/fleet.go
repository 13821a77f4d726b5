package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// fleet is the servers of one strategy's run: a group of workers rolled one
// at a time, or one server upgraded in place (strategy.single).
type fleet struct {
	s      *strategy
	exe    string
	env    []string // strategy, address, handoff path
	stderr io.Writer
	live   []*proc // serving now, by slot
	all    []*proc // every process started, killed at the end
	gens   int     // generations started so far
}

// start starts n servers and waits until they are all ready.
func (f *fleet) start(n int) error {
	for range n {
		p, err := f.spawn()
		if err != nil {
			return err
		}
		f.live = append(f.live, p)
	}
	return nil
}

// spawn starts the next generation and waits for its ready line.
func (f *fleet) spawn() (*proc, error) {
	f.gens++
	p, err := startProc(f.exe, append(f.env, envGen+"="+strconv.Itoa(f.gens)), f.stderr)
	if err != nil {
		return nil, err
	}
	f.all = append(f.all, p)
	if _, err := p.waitReady(); err != nil {
		return nil, err
	}
	return p, nil
}

// roll replaces the server in slot i%len(live) by a new generation: start
// it, wait until it serves, then stop the old one (SIGTERM, or, for a single
// server, the handoff tells it). mark is called at the moment the old one is
// told to stop. It returns the old server's report.
func (f *fleet) roll(i int, mark func()) (*workerReport, error) {
	if len(f.live) == 0 {
		return nil, errors.New("no server to roll")
	}
	slot := i % len(f.live)
	old := f.live[slot]
	if f.s.single {
		// Ready returns in the successor once the predecessor stopped
		// accepting: mark when the successor is seen ready.
		nw, err := f.spawn()
		if err != nil {
			return nil, err
		}
		mark()
		f.live[slot] = nw
		return old.stop(false)
	}
	nw, err := f.spawn()
	if err != nil {
		return nil, err
	}
	f.live[slot] = nw
	mark()
	return old.stop(true)
}

// stop stops every live server (SIGTERM), then kills any process left. It
// returns the first error.
func (f *fleet) stop() error {
	var first error
	for _, p := range f.live {
		if _, err := p.stop(true); err != nil && first == nil {
			first = fmt.Errorf("final stop: %w", err)
		}
	}
	f.live = nil
	f.kill()
	return first
}

// kill kills every process still running.
func (f *fleet) kill() {
	for _, p := range f.all {
		p.kill()
	}
}
