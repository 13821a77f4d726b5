package handoff

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/shared"
	"github.com/zerodrop/zerodrop/sockets"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
)

// testHookAdmitted, if set by a test, runs in each conversation admitted,
// before it reads the hello. Atomic: a test sets it while the server's
// goroutines run, ordered with them only by the socket, which the race
// detector does not see.
var testHookAdmitted atomic.Pointer[func()]

// testHookBatchSent, if set by a test, runs after each batch of fds is sent.
var testHookBatchSent atomic.Pointer[func(first int)]

// serverConfig is what the handoff server is given by its Upgrader when it
// is made: settings, and callbacks in place of a reference to the Upgrader.
type serverConfig struct {
	path         string // the handoff socket (Config.Path)
	gen          uint64 // ours; the successor's is gen + 1
	timeout      time.Duration
	readyTimeout time.Duration
	allowUIDs    []uint32
	onHandoff    func(Result, error) // Config.OnHandoff, or nil
	tickets      *ticket.Keys        // Config.TicketKeys, or nil
	log          *zap.Logger
	// offer returns the sockets to hand over: a snapshot, in order.
	offer func() []*sockets.Socket
	// onReady is called once a successor said ready and was sent done,
	// before the server logs that it is over: with the conversation,
	// which is the callee's from then on, and the listeners whose
	// connections the successor takes, if it takes any; else with nil,
	// nil.
	onReady func(successor *conn, takes []string)
}

// server serves the handoff socket: one successor at a time, any number of
// observers. Its goroutines end when it is closed or a successor took over.
type server struct {
	cfg   serverConfig
	ln    *net.UnixListener
	ino   uint64        // of the published file, to unlink only our own
	busy  atomic.Bool   // a successor's handoff is in progress; set and cleared under mu
	ended chan struct{} // closed when the handoff busy says is in progress ends
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[*conn]bool
	over  bool // a successor took over: the path is its now
	last  string
	fails uint64

	pool pool // bytes buffered by conversations beyond their quota

	quitOnce sync.Once
	quitC    chan struct{} // see quit
}

// newServer returns a server of cfg; the caller sets its listener (ln, and
// ino once the file is published) before it serves.
func newServer(cfg serverConfig) *server {
	return &server{cfg: cfg, conns: map[*conn]bool{}}
}

// serve accepts until the listener is closed. Any other accept error (EMFILE,
// ENFILE, ENOBUFS, ENOMEM...: the connection stays queued) is logged and
// retried after a backoff: a successor must never find a handoff socket that
// nobody serves any more.
func (s *server) serve() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		c, err := s.ln.AcceptUnix()
		if err == nil {
			delay = 0
			s.wg.Add(1)
			go s.handle(c, time.Now())
			continue
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
		delay = min(max(2*delay, acceptRetryMin), acceptRetryMax)
		s.cfg.log.Warn("accept on the handoff socket failed; retrying", zap.String("event", "handoff.accept_error"), zap.Duration("retry_in", delay), zap.Error(err))
		t := time.NewTimer(delay)
		select {
		case <-s.quit():
		case <-t.C:
		}
		t.Stop()
	}
}

// quit is closed when the server is closed.
func (s *server) quit() chan struct{} {
	s.quitOnce.Do(func() { s.quitC = make(chan struct{}) })
	return s.quitC
}

// close stops accepting, ends every conversation and waits for them.
func (s *server) close() {
	s.ln.Close()
	close(s.quit())
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	over := s.over
	s.mu.Unlock()
	s.wg.Wait()
	if !over {
		unpublish(s.cfg.path, s.ino)
	}
}

// maxConversations is the most conversations the handoff server holds at
// once. A newcomer beyond it takes the place of the conversation without
// hello that has been idle longest (told ErrBusy), or, if none may give way,
// is refused with ErrBusy. A conversation may give way only while nothing is
// queued on its socket and its goroutine holds no bytes it read; it has been
// idle since it was accepted or since its read last found no bytes. So a
// conversation that said hello (an observer being answered, the successor)
// never gives way, nor does one whose hello is in its receive queue,
// whatever its goroutine is doing (on a loaded machine it may not have begun
// to read).
const maxConversations = 64

// admit adds c, accepted at accepted, to the conversations, making room if
// needed. It fails with ErrClosed once the server is closed, ErrBusy when
// there is no room. c has been idle since it was accepted, as far as giving
// way goes: conversations accepted in a burst are admitted in the order
// their goroutines happen to run, and a successor accepted after a flood
// must not count as older than the flood connections admitted after it.
func (s *server) admit(c *conn, accepted time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		return ErrClosed
	}
	for len(s.conns) >= maxConversations {
		v := s.idlest()
		if v == nil {
			return &FrameError{Err: ErrBusy, Detail: fmt.Sprintf("%d conversations, none of them may give way (each said hello, or has bytes to read)", len(s.conns))}
		}
		if v.state.CompareAndSwap(fresh, evicted) { // else it said hello meanwhile
			delete(s.conns, v)
			v.c.SetReadDeadline(time.Now()) // ends its read, or recv sees evicted: it says busy
		}
	}
	c.waitingSince.Store(accepted.UnixNano())
	s.conns[c] = true
	return nil
}

// idlest returns the conversation that may give way (see maxConversations)
// and has been idle longest, or nil. Called with s.mu held.
func (s *server) idlest() *conn {
	type idle struct {
		c     *conn
		since int64
	}
	var cands []idle
	for c := range s.conns {
		if t := c.waitingSince.Load(); t != 0 && c.state.Load() == fresh {
			cands = append(cands, idle{c, t})
		}
	}
	slices.SortFunc(cands, func(a, b idle) int { return cmp.Compare(a.since, b.since) })
	for _, v := range cands {
		// An error means the socket is closed (Control fails only then):
		// the conversation is ending and its place is free anyway.
		if n, err := v.c.queued(); err != nil || n == 0 {
			return v.c
		}
	}
	return nil
}

// leave removes c from the conversations.
func (s *server) leave(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// handle serves a conversation accepted at accepted.
func (s *server) handle(nc *net.UnixConn, accepted time.Time) {
	defer s.wg.Done()
	c, err := newConn(nc, s.cfg.timeout)
	if err != nil {
		nc.Close()
		return
	}
	defer func() {
		if !c.kept.Load() { // a successor that takes connections: onReady's now
			c.Close()
		}
	}()
	c.pool = &s.pool
	log := s.cfg.log
	cred, err := c.peerCred()
	if err == nil {
		log = log.With(zap.Int32("peer_pid", cred.Pid), zap.Uint32("peer_uid", cred.Uid))
		err = checkPeer(cred, s.cfg.allowUIDs)
	}
	if err == nil {
		if err = s.admit(c, accepted); errors.Is(err, ErrClosed) {
			return
		}
	}
	if err == nil {
		defer s.leave(c)
		if hook := testHookAdmitted.Load(); hook != nil {
			(*hook)()
		}
		err = s.converse(c, log)
	}
	if c.state.Load() == evicted {
		err = &FrameError{Err: ErrBusy, Detail: fmt.Sprintf("gave way to a newcomer: %d conversations, and this one had been idle longest without hello", maxConversations)}
	}
	if err == nil {
		return
	}
	log.Warn("handoff refused or failed; still serving", zap.String("event", "handoff.failed"), zap.Error(err))
	switch _, remote := err.(*RemoteError); {
	case errors.Is(err, ErrBusy):
		c.send(&frame{Type: typeError, Code: codeBusy, Message: err.Error()}, nil)
	case !remote && !predecessorGone(err) && !errors.Is(err, ErrHandoffInProgress):
		c.send(&frame{Type: typeError, Code: code(err), Message: err.Error()}, nil)
	}
}

// converse reads the hello and answers an observer or hands over to a
// successor. A successor refused for its protocol version counts as a failed
// handoff, like one that fails during the transfer, so that Observe and
// Upgrade report why at once (a peer refused for its uid is not: we refuse it
// before it says what it wants).
func (s *server) converse(c *conn, log *zap.Logger) error {
	f, _, err := c.recv(0)
	if err != nil {
		return err
	}
	if !c.state.CompareAndSwap(fresh, greeted) {
		return nil // evicted: handle says why
	}
	if err := expect(f, typeHello); err != nil {
		return err
	}
	v, err := agree(f)
	if err != nil {
		if f.Role == roleSuccessor {
			s.done(Result{From: s.cfg.gen, PID: f.PID}, err)
		}
		return err
	}
	c.version = v
	h := helloFrame(rolePredecessor, s.cfg.gen, false, false)
	h.Version = v
	if f.Role == roleObserver {
		s.mu.Lock()
		h.LastError, h.Failures = s.last, s.fails
		s.mu.Unlock()
		return c.send(h, nil)
	}
	if f.Role != roleSuccessor {
		return &FrameError{Type: typeHello, Err: ErrProtocol, Detail: "role " + f.Role}
	}
	if !s.begin() {
		c.send(&frame{Type: typeError, Code: codeInProgress, Message: ErrHandoffInProgress.Error()}, nil)
		return ErrHandoffInProgress
	}
	log.Info("successor connected", zap.String("event", "handoff.successor_connected"))
	res := Result{From: s.cfg.gen, PID: f.PID}
	start := time.Now()
	err = s.transfer(c, h, f, log, &res)
	if err != nil {
		share(s.cfg.offer(), false)
	}
	res.Took = time.Since(start)
	// Free the slot before a failure becomes observable, so that a successor
	// started after Observe reports the failure is not told "in progress".
	s.mu.Lock()
	s.busy.Store(false)
	close(s.ended)
	s.mu.Unlock()
	s.done(res, err)
	return err
}

// begin starts a successor's handoff, unless one is in progress.
func (s *server) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy.Load() {
		return false
	}
	s.busy.Store(true)
	s.ended = make(chan struct{})
	return true
}

// inProgress returns a channel closed when the successor's handoff now in
// progress ends (it took over, or failed), or nil when none is.
func (s *server) inProgress() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.busy.Load() {
		return nil
	}
	return s.ended
}

// done records the outcome of a handoff to a successor and reports it to
// its onHandoff.
func (s *server) done(res Result, err error) {
	s.mu.Lock()
	if err != nil {
		s.last, s.fails = err.Error(), s.fails+1
	} else {
		res.To = s.cfg.gen + 1
	}
	s.mu.Unlock()
	if fn := s.cfg.onHandoff; fn != nil {
		fn(res, err)
	}
}

// transfer sends hello, offer and fd batches, then the handoff socket itself
// if the successor takes it (its hello says so), then waits for ready. Once a successor
// took over, any later one is refused as in progress: the sockets and the
// handoff socket are the first successor's now.
func (s *server) transfer(c *conn, h, hello *frame, log *zap.Logger, res *Result) error {
	start := time.Now()
	s.mu.Lock()
	over := s.over
	s.mu.Unlock()
	if over {
		c.send(&frame{Type: typeError, Code: codeInProgress, Message: ErrHandoffInProgress.Error() + " (already handed over)"}, nil)
		return fmt.Errorf("already handed over: %w", ErrHandoffInProgress)
	}
	if err := c.send(h, nil); err != nil {
		return err
	}
	socks := s.cfg.offer()
	res.Sockets = len(socks)
	share(socks, true)
	offer := offerFrame(socks, hello.Options)
	offer.Tickets = hello.Tickets && s.cfg.tickets != nil
	if err := c.send(offer, nil); err != nil {
		return err
	}
	for first := 0; first < len(socks); first += BatchFDs {
		batch := socks[first:min(first+BatchFDs, len(socks))]
		fds := make([]int, len(batch))
		for i, so := range batch {
			fds[i] = so.FD()
		}
		if err := c.send(&frame{Type: typeFDs, First: first, Count: len(fds)}, fds); err != nil {
			return err
		}
		if hook := testHookBatchSent.Load(); hook != nil {
			(*hook)(first)
		}
		a, _, err := c.recv(0)
		if err == nil {
			err = expect(a, typeAck)
		}
		if err == nil && a.Received != first+len(fds) {
			err = &FrameError{Type: typeAck, Err: ErrProtocol, Detail: fmt.Sprintf("ack of %d, sent %d", a.Received, first+len(fds))}
		}
		if err != nil {
			return err
		}
	}
	if offer.Tickets {
		if err := sendTickets(c, s.cfg.tickets); err != nil {
			return err
		}
	}
	if hello.Handoff {
		if err := s.sendSelf(c); err != nil {
			return err
		}
	}
	log.Info("sockets handed over; waiting for ready", zap.String("event", "handoff.sent"), zap.Int("count", len(socks)), zap.Bool("handoff_socket", hello.Handoff),
		zap.Bool("tickets", offer.Tickets), zap.Duration("took", time.Since(start)))
	return s.awaitReady(c, log, start)
}

// offerFrame declares socks. With values (the successor reads them), each
// inet socket's digest names its set of option values in OptionSets, which
// the successor compares on the options both versions know; without, the
// digest is the version 1 hash, which an older successor compares.
func offerFrame(socks []*sockets.Socket, values bool) *frame {
	f := &frame{Type: typeOffer, Sockets: make([]socketInfo, len(socks))}
	if values {
		f.OptionSets = map[string]map[string]string{}
	}
	for i, so := range socks {
		f.Sockets[i] = socketInfo{Name: so.Name(), Kind: string(so.Kind()), Network: so.Network(), Address: so.Address()}
		if so.Kind() == sockets.Unix {
			continue
		}
		d := so.Read().Digest
		if !values {
			f.Sockets[i].Digest = d.LegacyString()
			continue
		}
		key := d.String()
		if _, ok := f.OptionSets[key]; !ok {
			f.OptionSets[key] = d.Map()
		}
		f.Sockets[i].Digest = key
	}
	return f
}

// sendTickets sends the session-ticket keys: a sealed memfd of
// keys.Export, closed here once sent. Only a successor that passed the peer
// checks gets this far.
func sendTickets(c *conn, keys *ticket.Keys) error {
	mf, err := keys.Export()
	if err != nil {
		return err
	}
	defer mf.Close()
	return linux.Control(mf, func(fd int) error {
		return c.send(&frame{Type: typeTickets, Count: 1}, []int{fd})
	})
}

// sendSelf sends our handoff listening socket, declared with the name it
// is bound to (for a file, the temporary name it was bound under).
func (s *server) sendSelf(c *conn) error {
	return linux.Control(s.ln, func(fd int) error {
		name, err := linux.Sockname(fd)
		if err != nil {
			return err
		}
		info := socketInfo{Name: "handoff", Kind: kindUnix, Network: "unix", Address: name}
		return c.send(&frame{Type: typeHandoff, Sockets: []socketInfo{info}}, []int{fd})
	})
}

// awaitReady waits for the successor's ready, then stops: Exit is closed,
// we stop accepting on the handoff socket, and done sent. Closing our
// listener closes only our fd (it never unlinks: see listenHandoff, and no
// shutdown): if we sent the socket, the successor holds it, so the name
// stays bound and the file stays; connections arriving meanwhile wait in its
// queue until the successor serves.
func (s *server) awaitReady(c *conn, log *zap.Logger, start time.Time) error {
	r, _, err := c.recvWithin(0, s.cfg.readyTimeout)
	if err == nil {
		err = expect(r, typeReady)
	}
	if err == nil && r.Generation != s.cfg.gen+1 {
		err = &FrameError{Type: typeReady, Err: ErrProtocol, Detail: fmt.Sprintf("generation %d, expected %d", r.Generation, s.cfg.gen+1)}
	}
	if err != nil {
		return fmt.Errorf("waiting for ready: %w", err)
	}
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
	s.ln.Close()
	// done goes out before Exit closes: an application that reacts to Exit
	// with Close must not cut it off. The successor said it serves; we stop
	// even if it cannot read done.
	err = c.send(&frame{Type: typeDone, Generation: r.Generation}, nil)
	takes := c.version >= 2 && len(r.Takes) > 0 && err == nil
	if takes {
		c.kept.Store(true) // handle leaves it open: it is onReady's
		s.cfg.onReady(c, r.Takes)
	} else {
		s.cfg.onReady(nil, nil)
	}
	log.Info("successor ready; exit signalled", zap.String("event", "handoff.done"), zap.Uint64("successor_generation", r.Generation), zap.Duration("took", time.Since(start)),
		zap.Bool("takes_conns", takes), zap.NamedError("done", err))
	return nil
}

// share marks socks as handed to a successor (package shared), which makes
// their drain a release, or takes the marks back after a failed handoff. A
// mark that fails (fstat of our own fd) leaves drain to its holder scan.
func share(socks []*sockets.Socket, on bool) {
	for _, so := range socks {
		if on {
			shared.Mark(so.FD(), shared.Successor)
		} else {
			shared.Unmark(so.FD(), shared.Successor)
		}
	}
}
