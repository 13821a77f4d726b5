package tlsresume

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"io"
	"net"
	"sync"
)

// Capture collects the TLS 1.3 application traffic secrets of a server's
// connections, for their Recorders. Install it with Config; wrap each
// accepted connection with Wrap before tls.Server.
//
// It learns the secrets through tls.Config.KeyLogWriter, the only door
// crypto/tls offers to them, chained before the KeyLogWriter the Config had
// (which, if set, still receives every line). Only CLIENT_TRAFFIC_SECRET_0
// and SERVER_TRAFFIC_SECRET_0 are kept, and only until the connection's
// Recorder takes them; each line's buffer is zeroed once read (crypto/tls
// drops it after the call).
type Capture struct {
	mu      sync.Mutex
	secrets map[[32]byte]*pending
	next    io.Writer
}

type pending struct{ client, server []byte }

// maxPending bounds the secrets kept for handshakes whose Recorder has not
// taken them yet; a handshake past the bound is not captured (its
// connection is closed at a handoff, as without the option).
const maxPending = 1 << 16

// Config returns a clone of cfg whose KeyLogWriter feeds c (then cfg's own
// KeyLogWriter, if any). cfg may be nil.
func (c *Capture) Config(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	out := cfg.Clone()
	c.mu.Lock()
	c.next = cfg.KeyLogWriter
	c.mu.Unlock()
	out.KeyLogWriter = c
	return out
}

// Write takes one key log line (NSS format: label, client random, secret,
// in hex).
func (c *Capture) Write(line []byte) (int, error) {
	n := len(line)
	c.mu.Lock()
	next := c.next
	c.mu.Unlock()
	if next != nil {
		if _, err := next.Write(line); err != nil {
			clear(line)
			return 0, err
		}
	}
	c.take(line)
	clear(line)
	return n, nil
}

// take records the secret of a traffic-secret line.
func (c *Capture) take(line []byte) {
	label, rest, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
	if !ok {
		return
	}
	client := string(label) == "CLIENT_TRAFFIC_SECRET_0"
	if !client && string(label) != "SERVER_TRAFFIC_SECRET_0" {
		return
	}
	rh, sh, ok := bytes.Cut(rest, []byte(" "))
	var random [32]byte
	if !ok || hex.DecodedLen(len(rh)) != 32 || hex.DecodedLen(len(sh)) > 64 {
		return
	}
	if _, err := hex.Decode(random[:], rh); err != nil {
		return
	}
	secret := make([]byte, hex.DecodedLen(len(sh)))
	if _, err := hex.Decode(secret, sh); err != nil {
		clear(secret)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.secrets == nil {
		c.secrets = make(map[[32]byte]*pending)
	}
	p := c.secrets[random]
	if p == nil {
		if len(c.secrets) >= maxPending {
			clear(secret)
			return
		}
		p = &pending{}
		c.secrets[random] = p
	}
	if client {
		clear(p.client)
		p.client = secret
	} else {
		clear(p.server)
		p.server = secret
	}
}

// claim takes the two secrets of the connection whose ClientHello had
// random, once both are known.
func (c *Capture) claim(random [32]byte) (client, server []byte, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.secrets[random]
	if p == nil || p.client == nil || p.server == nil {
		return nil, nil, false
	}
	delete(c.secrets, random)
	return p.client, p.server, true
}

// forget erases what is kept for random.
func (c *Capture) forget(random [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.secrets[random]; p != nil {
		clear(p.client)
		clear(p.server)
		delete(c.secrets, random)
	}
}

// Wrap returns conn wrapped in a Recorder of c; pass it to tls.Server with
// the Config from c.Config.
func (c *Capture) Wrap(conn net.Conn) *Recorder {
	return &Recorder{Conn: conn, capture: c}
}
