package zerodrop

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
)

// siblings is a worker's place in a pool directory (Options.Pool): the
// ConnListener siblings pass their connections to, and, at its own stop,
// the sender to the sibling it passes its connections to.
type siblings struct {
	dir, self string
	cfg       handoff.ConnsConfig

	mu   sync.Mutex
	l    *handoff.ConnListener // nil once stopped
	s    *handoff.ConnSender
	used time.Time // when s was last given out
}

// A sibling's dial (connect and hellos) has siblingDial of its own: a live
// one answers in milliseconds, a wedged one (stopped, or never scheduled)
// not at all, and the stop goes on to the next sibling, or to closing its
// idle connections the old way. The whole search takes at most
// siblingSearch, and at most a quarter of what is left of the stop's ctx:
// the rest is the drain's.
const (
	siblingDial   = time.Second
	siblingSearch = 3 * time.Second
)

// listenSiblings serves a socket of ours in dir: "<pid>-<16 random hex
// digits>.sock", so that workers of different PID namespaces sharing dir
// (and a pid) never pick the same name; ListenConns refuses a path a live
// worker answers on anyway.
func listenSiblings(dir string, cfg handoff.ConnsConfig, handlers map[string]func(handoff.PassedConn)) (*siblings, error) {
	var r [8]byte
	rand.Read(r[:]) // never fails (crypto/rand)
	self := filepath.Join(dir, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(r[:])+".sock")
	l, err := handoff.ListenConns(self, cfg, handlers)
	if err != nil {
		return nil, err
	}
	return &siblings{dir: dir, self: self, cfg: cfg, l: l}, nil
}

// stopListening stops taking siblings' connections.
func (p *siblings) stopListening() {
	p.mu.Lock()
	l := p.l
	p.l = nil
	p.mu.Unlock()
	if l != nil {
		l.Close()
	}
}

func (p *siblings) close() {
	p.stopListening()
	p.mu.Lock()
	s := p.s
	p.s = nil
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// sender returns a sender to a sibling that takes the connections of the
// listener name: the one in use if it still does, else the newest other
// socket of the directory that answers and takes them.
func (p *siblings) sender(ctx context.Context, name string) (*handoff.ConnSender, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A receiver hangs up on a conversation idle for its Timeout (the
	// default, as ours): one idle half of it is dialled again.
	if p.s != nil && p.s.Takes(name) && time.Since(p.used) < idleReuse(p.cfg.Timeout) {
		p.used = time.Now()
		return p.s, nil
	}
	if p.s != nil {
		p.s.Close()
		p.s = nil
	}
	budget := siblingSearch
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(dl)/4)
	}
	search, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var errs []string
	for _, path := range p.candidates() {
		if search.Err() != nil {
			errs = append(errs, fmt.Sprintf("no sibling answered within %v", budget))
			break
		}
		dctx, dcancel := context.WithTimeout(search, siblingDial)
		s, err := handoff.DialConns(dctx, path, p.cfg)
		dcancel()
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !s.Takes(name) {
			s.Close()
			continue
		}
		p.s, p.used = s, time.Now()
		return s, nil
	}
	return nil, fmt.Errorf("zerodrop: no sibling in %s takes the connections of %s (%s): %w", p.dir, name, strings.Join(errs, "; "), handoff.ErrNotTaken)
}

// idleReuse is how long a sender to a sibling may stay unused and still be
// used: half the receiver's idle wait (ConnsConfig.Timeout, 10 s unset).
func idleReuse(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return timeout / 2
}

// candidates are the other sockets of the directory, newest first.
func (p *siblings) candidates() []string {
	ents, _ := os.ReadDir(p.dir)
	type cand struct {
		path string
		mod  int64
	}
	var cs []cand
	for _, e := range ents {
		path := filepath.Join(p.dir, e.Name())
		if path == p.self || !strings.HasSuffix(e.Name(), ".sock") || e.Type()&os.ModeSocket == 0 {
			continue
		}
		if info, err := e.Info(); err == nil {
			cs = append(cs, cand{path, info.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(cs, func(a, b cand) int { return cmp.Compare(b.mod, a.mod) })
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.path
	}
	return out
}
