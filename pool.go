package zerodrop

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/zerodrop/zerodrop/handoff"
)

// siblings is a worker's place in a pool directory (Options.Pool): the
// ConnListener siblings pass their connections to, and, at its own stop,
// the sender to the sibling it passes its connections to.
type siblings struct {
	dir, self string
	cfg       handoff.ConnsConfig

	mu sync.Mutex
	l  *handoff.ConnListener // nil once stopped
	s  *handoff.ConnSender
}

func listenSiblings(dir string, cfg handoff.ConnsConfig, handlers map[string]func(handoff.PassedConn)) (*siblings, error) {
	self := filepath.Join(dir, strconv.Itoa(os.Getpid())+".sock")
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
	if p.s != nil && p.s.Takes(name) {
		return p.s, nil
	}
	if p.s != nil {
		p.s.Close()
		p.s = nil
	}
	var errs []string
	for _, path := range p.candidates() {
		s, err := handoff.DialConns(ctx, path, p.cfg)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if !s.Takes(name) {
			s.Close()
			continue
		}
		p.s = s
		return s, nil
	}
	return nil, fmt.Errorf("zerodrop: no sibling in %s takes the connections of %s (%s): %w", p.dir, name, strings.Join(errs, "; "), handoff.ErrNotTaken)
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
