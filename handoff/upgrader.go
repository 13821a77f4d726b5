package handoff

import (
	"context"
	"net"
	"os"
	"sync"
	"time"

	"github.com/zerodrop/zerodrop/internal/neterr"
	"github.com/zerodrop/zerodrop/sockets"
	"go.uber.org/zap"
)

// Upgrader gives a process its listening sockets, from its predecessor or
// fresh, and hands them to its successor. Safe for concurrent use.
type Upgrader struct {
	cfg   Config
	log   *zap.Logger
	inh   *inherited     // what New obtained (inherit.go)
	table *sockets.Table // our sockets, what we offer
	pass  connPassing    // connections, in both roles (passing.go)

	mu     sync.Mutex // ready, closed, srv; Ready and Close release inh under it
	ready  bool
	closed bool
	srv    *server

	exit    chan struct{}
	exitOne sync.Once
}

// New connects to the predecessor serving cfg.Path, if one does, checks its
// credentials and receives and validates its sockets and its handoff socket
// (generation = its + 1).
// If nobody serves Path (no file, or a stale one), it uses systemd socket
// activation if present, else starts fresh (generation 1). If the predecessor
// dies during the transfer, New keeps the sockets it has received and
// validated (Listen returns them as inherited: they are the predecessor's
// live sockets, with its clients queued on them) and Listen creates the rest
// fresh; FallbackReason says why, and Generation is the predecessor's + 1
// once its hello was read (the lineage goes on), else 1. A predecessor that
// hangs up before sending any socket is dialled again: New inherits from
// whoever holds the handoff socket now (it passes from generation to
// generation), and starts fresh only if the path refuses. Other failures
// (refused credentials, version, malformed frames, invalid fds,
// ErrHandoffInProgress, ErrNoAnswer) are returned, as *net.OpError with Op
// "handoff", and nothing received stays open; New never starts fresh while
// the path answers (see "One lineage" in the package doc).
//
// ctx bounds every wait of New: the connect and each read and write of the
// protocol (Config.Timeout bounds each of them too); when ctx ends first the
// error wraps ctx.Err().
func New(ctx context.Context, cfg Config) (*Upgrader, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	u := &Upgrader{cfg: cfg, log: cfg.Logger, inh: &inherited{gen: 1}, exit: make(chan struct{})}
	if u.log == nil {
		u.log = zap.NewNop()
	}
	u.log = u.log.With(zap.String("handoff", cfg.Path), zap.Int("pid", os.Getpid()))
	u.pass.log, u.pass.opErr = u.log, u.opError
	if err := checkPath(cfg.Path); err != nil {
		return nil, u.opError(err)
	}
	if err := checkDir(cfg.Path); err != nil {
		return nil, err
	}
	if cfg.PIDFile != "" {
		if err := checkDir(cfg.PIDFile); err != nil {
			return nil, err
		}
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	h := handshake{cfg: &u.cfg, log: u.log, in: u.inh}
	fresh, err := h.connect(ctx, dctx)
	if err != nil {
		return nil, u.opError(err)
	}
	if fresh && u.inh.fback != nil {
		u.log.Warn("predecessor lost during handoff; keeping the sockets received, the rest will be fresh", zap.String("event", "handoff.fallback"),
			zap.Error(u.inh.fback), zap.Int("kept", len(u.inh.socks)), zap.Uint64("generation", u.inh.gen))
	}
	// systemd's sockets only when no predecessor handed us any: a
	// predecessor's are the service's live ones.
	u.table, err = sockets.New(sockets.Config{Listen: cfg.Listen, WarnOnMismatch: cfg.WarnOnMismatch, Systemd: fresh, Logger: u.log}, u.inh.socks)
	u.inh.socks = nil
	if err != nil { // only systemd's: no predecessor to hang up on
		return nil, u.opError(err)
	}
	if fresh {
		u.log.Info("no predecessor", zap.String("event", "handoff.fresh"), zap.Uint64("generation", u.inh.gen), zap.Bool("systemd", u.table.Activated()))
	}
	return u, nil
}

// Table is the Upgrader's socket table: what Listen and ListenPacket
// return, and what a successor is offered.
func (u *Upgrader) Table() *sockets.Table { return u.table }

func (u *Upgrader) opError(err error) error {
	return neterr.Op("handoff", "unix", &net.UnixAddr{Name: u.cfg.Path, Net: "unix"}, err)
}

// Generation is this process's generation: 1 for the first, predecessor's + 1
// after each handoff. Constant for the Upgrader's life.
func (u *Upgrader) Generation() uint64 { return u.inh.gen }

// FallbackReason is why New did not complete a handoff although a
// predecessor answered (it died during the transfer), or nil. The sockets
// received before it died are kept; see New.
func (u *Upgrader) FallbackReason() error { return u.inh.fback }

// Exit is closed when a successor has called Ready: stop accepting on every
// listener now (close them), then drain.
func (u *Upgrader) Exit() <-chan struct{} { return u.exit }

// Settle waits until no successor is taking over (a handoff in progress ends
// within Config.Timeout and ReadyTimeout, or when ctx ends), and reports
// whether one took over (Exit is closed). A process told to stop while a
// successor is taking over calls it first, so that the stop hands over to
// that successor (its connections too) instead of racing it.
func (u *Upgrader) Settle(ctx context.Context) (tookOver bool) {
	u.mu.Lock()
	srv := u.srv
	u.mu.Unlock()
	if srv != nil {
		if ended := srv.inProgress(); ended != nil {
			select {
			case <-ended:
			case <-ctx.Done():
			}
		}
	}
	select {
	case <-u.exit:
		return true
	default:
		return false
	}
}

// Close stops serving the handoff socket, closes the Upgrader's references to
// the sockets (listeners given to the caller stay open: the caller owns them)
// and, before Ready, the connection to the predecessor, which then keeps
// serving: Close returns once the predecessor has seen it (at most
// Config.Timeout), so that a new successor may start at once. Safe to call
// more than once.
func (u *Upgrader) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	srv := u.srv
	pred, hln := u.inh.release()
	u.mu.Unlock()
	u.pass.close()
	if hln != nil {
		hln.Close() // our reference; the predecessor serves it
	}
	if srv != nil {
		srv.close()
	}
	if pred != nil {
		// The predecessor frees its handoff slot when it sees us go, and
		// closes its side after that: wait for it, so that a successor
		// started right after Close is not told ErrHandoffInProgress.
		pred.hangUp(u.cfg.Timeout)
	}
	return u.table.Close()
}
