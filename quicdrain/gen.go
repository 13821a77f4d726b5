package quicdrain

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
)

// Config configures a generation. The zero value of each field but Dir
// means its default.
type Config struct {
	// Dir holds the generations' forwarding sockets (unix datagram
	// sockets named "<Name>.<generation>.sock", mode 0600). It must be
	// writable by us only (as the handoff socket's directory). Required.
	Dir string
	// Name tells the forwarding sockets of several QUIC sockets apart;
	// default "quic".
	Name string
	// Queue bounds the datagrams waiting for the generation's own
	// quic.Transport; default 4096. The datagrams forwarded to an older
	// generation wait in its socket's receive queue, bounded by the kernel
	// (net.unix.max_dgram_qlen, default 512): over either bound a datagram
	// is dropped and counted.
	Queue int
	// MaxHandshakes bounds the table of client-chosen connection IDs
	// (handshakes begun, handed to the successor); default 2048. A flood of
	// Initials evicts the oldest entries (counted).
	MaxHandshakes int
	// HandshakeTTL is how long a client-chosen connection ID routes to the
	// generation that read its first Initial; default 10 s (twice quic-go's
	// default handshake idle timeout).
	HandshakeTTL time.Duration
	// HandoverTimeout bounds how long Start waits for the predecessor's
	// handover (its table, once it stopped reading); default 2 s. Past it
	// Start reads the socket anyway.
	HandoverTimeout time.Duration
	// Logger receives what cannot be returned; nil means no logging.
	Logger *zap.Logger
}

func (c *Config) defaults() {
	if c.Name == "" {
		c.Name = "quic"
	}
	if c.Queue <= 0 {
		c.Queue = 4096
	}
	if c.MaxHandshakes <= 0 {
		c.MaxHandshakes = 2048
	}
	if c.HandshakeTTL <= 0 {
		c.HandshakeTTL = 10 * time.Second
	}
	if c.HandoverTimeout <= 0 {
		c.HandoverTimeout = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// ErrNoSuccessor is returned by Handover when the successor has no
// forwarding socket: this generation then keeps reading the socket.
var ErrNoSuccessor = errors.New("no successor")

// ErrNoDir is returned by New when Config.Dir is empty.
var ErrNoDir = errors.New("quicdrain: Config.Dir is required")

// Gen is one generation of a QUIC server on a UDP socket shared with its
// predecessors and successor. See the package documentation.
type Gen struct {
	cfg   Config
	gen   uint64
	udp   *net.UDPConn
	fwd   *fwdSocket
	own   *packetConn
	tr    *quic.Transport
	codec atomic.Pointer[cidCodec]
	table *dcidTable       // the reader's; read by Handover once it stopped
	dests map[uint64]*dest // the reader's: the older generations it forwards to

	handover chan []byte // the predecessor's handover message
	steered  bool        // a socket of its own, routed by the kernel (steer.go)

	mu        sync.Mutex
	reading   bool
	readDone  chan struct{}
	started   bool
	handedOff bool
	closed    bool

	lastLong atomic.Int64 // unix nanos of the last long-header datagram routed to us
	pending  atomic.Int64 // handshakes under way (pending.go)
	stats    counters
}

// Listen obtains the UDP socket name through u (inherited from the
// predecessor, or fresh) and returns the generation over it, numbered
// u.Generation(). The Gen owns the socket returned by u.
func Listen(ctx context.Context, u *handoff.Upgrader, name, network, address string, cfg Config) (*Gen, error) {
	pc, err := u.ListenPacket(ctx, name, network, address)
	if err != nil {
		return nil, err
	}
	udp, ok := udpOf(pc)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("quicdrain: %T is not a UDP socket", pc)
	}
	g, err := New(udp, u.Generation(), cfg)
	if err != nil {
		pc.Close()
		return nil, err
	}
	return g, nil
}

func udpOf(pc net.PacketConn) (*net.UDPConn, bool) {
	switch c := pc.(type) {
	case *net.UDPConn:
		return c, true
	case *reuseport.PacketConn:
		return c.UDPConn, true
	}
	return nil, false
}

// New returns generation gen (at least 1) over udp, which it takes
// ownership of: it binds the generation's forwarding socket in cfg.Dir and
// creates the quic.Transport (Transport). Call Start once the predecessor
// was told to stop (after handoff's Ready), and Handover once the
// successor is ready.
func New(udp *net.UDPConn, gen uint64, cfg Config) (*Gen, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, ErrNoDir
	}
	key := make([]byte, KeyLen)
	rand.Read(key)
	codec, err := newCIDCodec(key, gen)
	if err != nil {
		return nil, err
	}
	g := &Gen{cfg: cfg, gen: gen, udp: udp, table: newDCIDTable(cfg.MaxHandshakes, cfg.HandshakeTTL), dests: map[uint64]*dest{}, handover: make(chan []byte, 1)}
	g.codec.Store(codec)
	g.fwd, err = listenFwd(g.path(gen))
	if err != nil {
		return nil, err
	}
	g.own = newPacketConn(udp, cfg.Queue)
	g.tr = &quic.Transport{Conn: g.own, ConnectionIDGenerator: generator{g}, ConnContext: g.connContext}
	go g.readFwd()
	return g, nil
}

// generator is the Transport's ConnectionIDGenerator: the codec of the
// moment (Start replaces the key by the lineage's).
type generator struct{ g *Gen }

func (x generator) GenerateConnectionID() (quic.ConnectionID, error) {
	return x.g.codec.Load().GenerateConnectionID()
}
func (x generator) ConnectionIDLen() int { return CIDLen }

// Transport returns the generation's quic.Transport: its connection IDs
// carry the generation, it sends no stateless reset (StatelessResetKey
// stays nil: a datagram it cannot place may belong to another generation).
// Listen on it before Start, so that the first Initial finds a listener.
func (g *Gen) Transport() *quic.Transport { return g.tr }

// Generation returns the generation's number.
func (g *Gen) Generation() uint64 { return g.gen }

func (g *Gen) path(gen uint64) string {
	return filepath.Join(g.cfg.Dir, fmt.Sprintf("%s.%d.sock", g.cfg.Name, gen))
}

// Start makes this generation the one that reads the UDP socket. If a
// predecessor's forwarding socket exists, Start first waits (at most
// Config.HandoverTimeout, or ctx) for its handover: it stopped reading and
// sent its lineage key and its table of handshakes under way, which this
// generation then forwards to it.
func (g *Gen) Start(ctx context.Context) error {
	g.mu.Lock()
	if g.started || g.closed {
		g.mu.Unlock()
		return errors.New("quicdrain: Start called twice or after Close")
	}
	g.started = true
	g.mu.Unlock()
	if g.gen > 1 && !g.steered {
		if _, err := os.Stat(g.path(g.gen - 1)); err == nil {
			g.awaitHandover(ctx)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return net.ErrClosed
	}
	g.reading, g.readDone = true, make(chan struct{})
	go g.readUDP(g.readDone)
	return nil
}

func (g *Gen) awaitHandover(ctx context.Context) {
	t := time.NewTimer(g.cfg.HandoverTimeout)
	defer t.Stop()
	select {
	case msg := <-g.handover:
		if err := g.applyHandover(msg); err != nil {
			g.cfg.Logger.Warn("bad handover", zap.String("event", "quic.handover_error"), zap.Error(err))
			g.stats.handoverErrors.Add(1)
		}
	case <-t.C:
		g.stats.handoverTimeouts.Add(1)
		g.cfg.Logger.Warn("no handover from the predecessor", zap.String("event", "quic.handover_timeout"), zap.Uint64("generation", g.gen))
	case <-ctx.Done():
	}
}

// Handover stops this generation reading the UDP socket and sends the
// successor (generation+1) the lineage key and the table of handshakes
// under way; from then on the successor reads, and forwards what is ours.
// Call it once the successor is ready (handoff's Exit). Without a successor
// (its forwarding socket does not exist) it returns an error matching
// ErrNoSuccessor and this generation goes on reading: a stop without
// successor (HTTP3.Shutdown at SIGTERM) still hears its clients.
// A steered generation (ListenSteered) has nothing to hand over: Handover
// returns nil at once and it goes on reading its own socket.
func (g *Gen) Handover(ctx context.Context) error {
	if g.steered {
		return nil // the kernel routes; we go on reading our socket
	}
	if _, err := os.Stat(g.path(g.gen + 1)); err != nil {
		// nobody to read after us: keep reading (a stop without successor)
		return fmt.Errorf("quicdrain: handover to generation %d: %w (%w)", g.gen+1, ErrNoSuccessor, err)
	}
	g.mu.Lock()
	if g.handedOff || g.closed {
		g.mu.Unlock()
		return nil
	}
	g.handedOff = true
	done, reading := g.readDone, g.reading
	g.reading = false
	g.mu.Unlock()
	if reading {
		g.udp.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
	msg := encodeHandover(g.codec.Load(), g.table.live(time.Now()), time.Now())
	err := g.fwd.sendControl(ctx, g.path(g.gen+1), msg)
	g.closeDests()
	if err != nil {
		return fmt.Errorf("quicdrain: handover to generation %d: %w", g.gen+1, err)
	}
	return nil
}

// WaitHandshakes waits until no handshake is under way (a connection
// quic-go created that was not accepted: ServeHTTP3 tells; with a
// listener of your own, call Accepted for each connection it accepts) and no Initial or Handshake datagram reached this
// generation for quiet, or ctx ends. Call it after Handover, before the
// HTTP/3 GOAWAY.
func (g *Gen) WaitHandshakes(ctx context.Context, quiet time.Duration) error {
	for {
		last := time.Unix(0, g.lastLong.Load())
		wait := quiet - time.Since(last)
		if wait <= 0 && g.pending.Load() == 0 {
			return nil
		}
		wait = max(wait, 5*time.Millisecond)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close closes the Transport (its connections end at once), the
// forwarding socket (its file is removed: datagrams forwarded to this
// generation from then on are dropped and counted by the sender) and our
// reference to the UDP socket. Safe to call twice.
func (g *Gen) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	done, reading := g.readDone, g.reading
	g.mu.Unlock()
	if reading {
		g.udp.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
	g.closeDests()
	err := g.tr.Close()
	g.own.Close()
	if ferr := g.fwd.close(); err == nil {
		err = ferr
	}
	if uerr := g.udp.Close(); err == nil {
		err = uerr
	}
	return err
}
