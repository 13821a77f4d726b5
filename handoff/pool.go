package handoff

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
)

// Pool is a worker's place in a pool directory shared by the workers of a
// SO_REUSEPORT pool: the ConnListener its siblings pass their connections
// to while it runs (<dir>/<pid>-<16 random hex digits>.sock), and, at its
// own stop, the sender to the sibling it passes its connections to (the
// newest other socket of the directory that answers: in a roll, the
// replacement started before the stop). It is how a worker that builds its
// own listeners and drain.Server joins a pool:
//
//	p, err := handoff.JoinPool(dir, handoff.ConnsConfig{Addrs: addrs}, handlers)
//	srv.HandOver = func(ctx context.Context, conns []drain.Detached) (int, error) {
//		return p.PassConns(ctx, "http", detachedToPassed(conns))
//	}
//	// at the stop: p.StopListening(); srv.Shutdown(ctx); p.Close()
//
// The directory must be writable by us only (as a handoff socket's). Safe
// for concurrent use.
type Pool struct {
	dir, self string
	cfg       ConnsConfig

	mu   sync.Mutex
	l    *ConnListener // nil once stopped
	s    *ConnSender
	used time.Time // when s was last given out
}

// A sibling's dial (connect and hellos) has poolDial of its own: a live one
// answers in milliseconds, a wedged one (stopped, or never scheduled) not at
// all, and the stop goes on to the next sibling, or to closing its idle
// connections the old way. The whole search takes at most poolSearch, and at
// most a quarter of what is left of the stop's ctx: the rest is the drain's.
const (
	poolDial   = time.Second
	poolSearch = 3 * time.Second
)

// JoinPool serves a socket of ours in dir (ListenConns with cfg and
// handlers, which the connections siblings pass go to), named
// "<pid>-<16 random hex digits>.sock", so that workers of different PID
// namespaces sharing dir (and a pid) never pick the same name; ListenConns
// refuses a path a live worker answers on anyway. Close it once done.
func JoinPool(dir string, cfg ConnsConfig, handlers map[string]func(PassedConn)) (*Pool, error) {
	var r [8]byte
	rand.Read(r[:]) // never fails (crypto/rand)
	self := filepath.Join(dir, strconv.Itoa(os.Getpid())+"-"+hex.EncodeToString(r[:])+".sock")
	l, err := ListenConns(self, cfg, handlers)
	if err != nil {
		return nil, err
	}
	cfg.defaults()
	return &Pool{dir: dir, self: self, cfg: cfg, l: l}, nil
}

// Addr is the address of our socket in the pool directory.
func (p *Pool) Addr() string { return p.self }

// StopListening stops taking siblings' connections and removes our socket
// from the directory (siblings stopping now pick another): call it as the
// stop begins, before the drain.Server that serves the connections passed
// stops taking them. Safe to call more than once.
func (p *Pool) StopListening() {
	p.mu.Lock()
	l := p.l
	p.l = nil
	p.mu.Unlock()
	if l != nil {
		l.Close()
	}
}

// Close stops listening and ends the conversation with the sibling we pass
// connections to (it keeps those it acknowledged). Safe to call more than
// once.
func (p *Pool) Close() error {
	p.StopListening()
	p.mu.Lock()
	s := p.s
	p.s = nil
	p.mu.Unlock()
	if s != nil {
		s.Close()
	}
	return nil
}

// PassConns passes conns, accepted on our listener name, to a sibling that
// takes that listener's connections (see Sender), and returns how many it
// took: conns[:passed] are the sibling's, the rest still ours. Each conn's
// Listener is set to name. With conns empty it only finds the sibling: an
// error (wrapping ErrNotTaken when none takes them) then says nobody would
// take them, as drain.Server.HandOver's first call asks.
func (p *Pool) PassConns(ctx context.Context, name string, conns []PassedConn) (passed int, err error) {
	s, err := p.Sender(ctx, name)
	if err != nil || len(conns) == 0 {
		return 0, err
	}
	for i := range conns {
		conns[i].Listener = name
	}
	return s.PassConns(ctx, conns)
}

// Sender returns a sender to a sibling that takes the connections of the
// listener name: the one in use if it still does, else the newest other
// socket of the directory that answers and takes them. The Pool owns it
// (Close closes it).
func (p *Pool) Sender(ctx context.Context, name string) (*ConnSender, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A receiver hangs up on a conversation idle for its Timeout (the
	// default, as ours): one idle half of it is dialled again.
	if p.s != nil && p.s.Takes(name) && time.Since(p.used) < p.cfg.Timeout/2 {
		p.used = time.Now()
		return p.s, nil
	}
	if p.s != nil {
		p.s.Close()
		p.s = nil
	}
	budget := poolSearch
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
		dctx, dcancel := context.WithTimeout(search, poolDial)
		s, err := DialConns(dctx, path, p.cfg)
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
	return nil, &PoolError{Dir: p.dir, Listener: name, Tried: errs}
}

// PoolError says that no sibling of a pool directory takes the connections
// of a listener; it matches ErrNotTaken.
type PoolError struct {
	Dir, Listener string
	Tried         []string // why each sibling tried did not take them
}

func (e *PoolError) Error() string {
	return fmt.Sprintf("no sibling in %s takes the connections of %s (%s): %v", e.Dir, e.Listener, strings.Join(e.Tried, "; "), ErrNotTaken)
}

// Is reports whether target is ErrNotTaken.
func (e *PoolError) Is(target error) bool { return target == ErrNotTaken }

// candidates are the other sockets of the directory, newest first.
func (p *Pool) candidates() []string {
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
