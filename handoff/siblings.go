package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Passing connections between siblings: the workers of a SO_REUSEPORT pool
// are not each other's predecessor, so a worker being rolled passes its
// connections to a sibling (or its replacement) that serves a ConnListener.
// The conversation is the connection part of the handoff protocol:
//
//	S -> R  {"type":"hello","version":1,"max_version":2,"role":"sibling","pid":..,"uid":..}
//	R -> S  {"type":"hello","version":2,"role":"sibling","pid":..,"uid":..,"takes":["http",..]}
//	then conns batches and acks as between generations, until S hangs up.
//
// Both sides check the other's credentials (SO_PEERCRED, our effective UID
// or ConnsConfig.AllowUIDs) before anything else, the receiver's path is
// checked like a handoff socket's (its directory writable by us only), and
// every fd is validated before it is acknowledged.

// ConnsConfig configures ListenConns and DialConns.
type ConnsConfig struct {
	// AllowUIDs widens the peers accepted, in both directions, beyond our
	// own effective UID.
	AllowUIDs []uint32
	// Timeout bounds the connect and every read and write of a
	// conversation; default 10 s. A ConnListener also waits at most
	// Timeout for a conversation's next batch, then hangs up (the sender's
	// next PassConns fails with ErrNotTaken, nothing passed): an idle
	// sibling holds one of its few slots no longer.
	Timeout time.Duration
	// Logger receives each step; nil means no logging.
	Logger *zap.Logger
	// Addrs is, for ListenConns, the address of the listener of each name
	// it has a handler for (required for each): a connection passed for
	// the name must be bound to it (its port, and its IP unless the
	// listener's is unspecified), else its batch is refused (ErrValidation).
	Addrs map[string]net.Addr
}

func (c *ConnsConfig) defaults() {
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// ConnListener receives the connections sibling processes pass to it, for
// the listeners it has handlers for.
type ConnListener struct {
	cfg      ConnsConfig
	path     string
	ino      uint64
	ln       *net.UnixListener
	handlers map[string]func(PassedConn)
	addrs    map[string]string // of the listener of each handler's name
	handed   handed            // the connections handed to the handlers
	takes    []string
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[*conn]bool // nil once closed
}

// maxSiblings bounds the conversations a ConnListener holds at once; more
// are refused with ErrBusy (code "busy"), each for at most its Timeout when
// idle.
const maxSiblings = 16

// ListenConns serves path (a file path in a directory only we can write, or
// "@name" in the abstract namespace) for siblings that pass connections:
// each connection passed for a listener name in handlers, accepted on that
// listener's address in cfg.Addrs, is given to that handler, one conversation's connections in order, on one goroutine per
// conversation (a handler must not block for long). The socket file, if any,
// appears atomically (linked into place) and is removed by Close. A path a
// live listener answers on is refused (ErrPathInUse); a stale socket file
// there is replaced.
func ListenConns(path string, cfg ConnsConfig, handlers map[string]func(PassedConn)) (*ConnListener, error) {
	cfg.defaults()
	l := &ConnListener{cfg: cfg, path: path, handlers: map[string]func(PassedConn){}, addrs: map[string]string{}, conns: map[*conn]bool{}}
	opErr := func(err error) error {
		return pathError("listen conns", path, err)
	}
	for name, h := range handlers {
		switch {
		case h == nil:
			return nil, opErr(fmt.Errorf("nil handler for %q", name))
		case cfg.Addrs[name] == nil:
			return nil, opErr(fmt.Errorf("no address for the listener %q (ConnsConfig.Addrs)", name))
		}
		l.handlers[name] = h
		l.addrs[name] = cfg.Addrs[name].String()
		l.takes = append(l.takes, name)
	}
	slices.Sort(l.takes)
	if len(l.takes) == 0 || len(l.takes) > MaxSockets {
		return nil, opErr(fmt.Errorf("%d handlers, want 1 to %d", len(l.takes), MaxSockets))
	}
	if err := checkPath(path); err != nil {
		return nil, opErr(err)
	}
	if err := checkDir(path); err != nil {
		return nil, err
	}
	ln, tmp, err := listenHandoff(path)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) { // an abstract name of a live listener
			err = fmt.Errorf("%w: %w", ErrPathInUse, err)
		}
		return nil, opErr(err)
	}
	if !abstract(path) {
		if l.ino, err = publishNew(tmp, path, cfg.Timeout); err != nil {
			ln.Close()
			os.Remove(tmp)
			return nil, opErr(err)
		}
	}
	l.ln = ln
	l.wg.Add(1)
	go l.serve()
	return l, nil
}

// Addr is the socket's address.
func (l *ConnListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close stops accepting, ends every conversation (each sender keeps the
// connections not yet acknowledged), waits for them, and removes the file.
func (l *ConnListener) Close() error {
	l.mu.Lock()
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	if conns == nil {
		return nil
	}
	l.ln.Close()
	for c := range conns {
		c.Close()
	}
	l.wg.Wait()
	unpublish(l.path, l.ino)
	return nil
}

func (l *ConnListener) serve() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		nc, err := l.ln.AcceptUnix()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // EMFILE and the like: the sibling waits in the queue
			delay = min(max(2*delay, acceptRetryMin), acceptRetryMax)
			time.Sleep(delay)
			continue
		}
		delay = 0
		l.wg.Add(1)
		go l.converse(nc)
	}
}

// converse checks a sibling, answers its hello with the listeners we take,
// then receives its connections until it hangs up.
func (l *ConnListener) converse(nc *net.UnixConn) {
	defer l.wg.Done()
	c, err := newConn(nc, l.cfg.Timeout)
	if err != nil {
		nc.Close()
		return
	}
	log := l.cfg.Logger
	l.mu.Lock()
	switch {
	case l.conns == nil:
		err = ErrClosed
	case len(l.conns) >= maxSiblings:
		err = &FrameError{Err: ErrBusy, Detail: fmt.Sprintf("%d conversations", len(l.conns))}
	default:
		l.conns[c] = true
	}
	l.mu.Unlock()
	if err == nil {
		defer func() {
			l.mu.Lock()
			if l.conns != nil {
				delete(l.conns, c)
			}
			l.mu.Unlock()
		}()
		err = l.greet(c)
	}
	if err != nil {
		if !errors.Is(err, ErrClosed) && !predecessorGone(err) {
			log.Warn("sibling refused", zap.String("event", "handoff.conns_refused"), zap.Int("received", 0), zap.Error(err))
			c.send(&frame{Type: typeError, Code: code(err), Message: err.Error()}, nil)
		}
		c.Close()
		return
	}
	receiveConns(c, &receiver{handlers: l.handlers, addrs: l.addrs, handed: &l.handed, idle: l.cfg.Timeout, log: log})
}

// greet checks the sibling's credentials and hello, and answers.
func (l *ConnListener) greet(c *conn) error {
	cred, err := c.peerCred()
	if err != nil {
		return err
	}
	if err := checkPeer(cred, l.cfg.AllowUIDs); err != nil {
		return err
	}
	f, _, err := c.recv(0)
	if err != nil {
		return err
	}
	if err := expect(f, typeHello); err != nil {
		return err
	}
	if f.Role != roleSibling {
		return &FrameError{Type: typeHello, Err: ErrProtocol, Detail: "role " + f.Role + ", want " + roleSibling}
	}
	v, err := agree(f)
	if err == nil && v < 2 {
		err = &FrameError{Type: typeHello, Err: ErrVersion, Detail: fmt.Sprintf("sibling speaks version %d; connections need 2", v)}
	}
	if err != nil {
		return err
	}
	return c.send(&frame{Type: typeHello, Version: v, Role: roleSibling, PID: os.Getpid(), UID: uint32(os.Geteuid()), Takes: l.takes}, nil)
}

// DialConns connects to the ConnListener serving path, checks its
// credentials, and returns a sender for the connections of the listeners
// it takes (ConnSender.Takes). ctx bounds the connect and the hellos.
func DialConns(ctx context.Context, path string, cfg ConnsConfig) (*ConnSender, error) {
	cfg.defaults()
	opErr := func(err error) error {
		return pathError("dial conns", path, err)
	}
	if err := checkPath(path); err != nil {
		return nil, opErr(err)
	}
	if err := checkDir(path); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	nc, ok, err := dial(dctx, path)
	if err == nil && !ok {
		err = fmt.Errorf("nobody serves it: %w", ErrNotTaken)
	}
	if err != nil {
		return nil, opErr(err)
	}
	c, err := newConn(nc, cfg.Timeout)
	if err != nil {
		nc.Close()
		return nil, opErr(err)
	}
	s, err := dialConns(ctx, c, cfg, opErr)
	if err != nil {
		c.Close()
		return nil, opErr(err)
	}
	return s, nil
}

func dialConns(ctx context.Context, c *conn, cfg ConnsConfig, opErr func(error) error) (*ConnSender, error) {
	defer c.bind(ctx)()
	cred, err := c.peerCred()
	if err != nil {
		return nil, err
	}
	if err := checkPeer(cred, cfg.AllowUIDs); err != nil {
		return nil, err
	}
	if err := c.send(&frame{Type: typeHello, Version: baseVersion, MaxVersion: Version, Role: roleSibling, PID: os.Getpid(), UID: uint32(os.Geteuid())}, nil); err != nil {
		return nil, c.answeredFirst(err)
	}
	f, _, err := c.recv(0)
	if err != nil {
		return nil, err
	}
	if err := expect(f, typeHello); err != nil {
		return nil, err
	}
	if f.Version < 2 || f.Version > Version || f.Role != roleSibling {
		return nil, &FrameError{Type: typeHello, Err: ErrVersion, Detail: fmt.Sprintf("receiver answers version %d role %q", f.Version, f.Role)}
	}
	cfg.Logger.Debug("connected to a sibling", zap.String("event", "handoff.sibling_connected"), zap.Int32("peer_pid", cred.Pid), zap.Strings("takes", f.Takes))
	return newConnSender(c, f.Takes, cfg.Logger, opErr), nil
}
