package ticket

import (
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"sync"
	"time"
)

// Defaults of Keys' fields.
const (
	// DefaultRotateEvery is how long a key encrypts tickets, by default.
	DefaultRotateEvery = 24 * time.Hour
	// DefaultLifetime is how long a key decrypts tickets after it stopped
	// encrypting, by default: crypto/tls's longest ticket lifetime.
	DefaultLifetime = 7 * 24 * time.Hour
	// MaxKeys is the most keys a Keys holds (and Import accepts).
	MaxKeys = 32
)

// key is one session-ticket key and when it began to encrypt.
type key struct {
	b       [32]byte
	created time.Time
}

// Keys holds the session-ticket keys of a lineage of processes, the newest
// (the one that encrypts) first. Safe for concurrent use. The zero value is
// not usable: see New.
type Keys struct {
	// RotateEvery is how long a key encrypts before a fresh one takes its
	// place (Refresh, Install); 0 means DefaultRotateEvery.
	RotateEvery time.Duration
	// Lifetime is how long a key still decrypts after it stopped
	// encrypting; 0 means DefaultLifetime.
	Lifetime time.Duration

	mu     sync.Mutex
	keys   []*key
	inner  *tls.Config // holds the keys: its EncryptTicket and DecryptTicket serve Install's hooks
	closed bool
	now    func() time.Time // time.Now; tests change it
}

// New returns Keys holding one fresh random key.
func New() (*Keys, error) {
	k := &Keys{now: time.Now, inner: &tls.Config{}}
	nk, err := fresh(k.now())
	if err != nil {
		return nil, err
	}
	k.keys = []*key{nk}
	k.apply()
	return k, nil
}

// fresh draws a random key.
func fresh(now time.Time) (*key, error) {
	k := &key{created: now}
	if _, err := rand.Read(k.b[:]); err != nil {
		return nil, fmt.Errorf("ticket: draw a key: %w", err)
	}
	return k, nil
}

func (k *Keys) rotateEvery() time.Duration {
	if k.RotateEvery > 0 {
		return k.RotateEvery
	}
	return DefaultRotateEvery
}

func (k *Keys) lifetime() time.Duration {
	if k.Lifetime > 0 {
		return k.Lifetime
	}
	return DefaultLifetime
}

// Len is how many keys k holds: one that encrypts, the rest only decrypt.
func (k *Keys) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// String says how many keys k holds, never what they are.
func (k *Keys) String() string { return fmt.Sprintf("ticket.Keys(%d keys)", k.Len()) }

// Rotate puts a fresh key first (it encrypts from now on; the others only
// decrypt) and drops keys past their lifetime. Every config of Install, and
// every clone of one, uses the new keys at once.
func (k *Keys) Rotate() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	return k.rotate()
}

// Refresh rotates if the key that encrypts is RotateEvery old or older, and
// drops keys past their lifetime. The configs of Install call it before
// each ticket they issue; call it as often as you like.
func (k *Keys) Refresh() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return ErrClosed
	}
	if k.now().Sub(k.keys[0].created) >= k.rotateEvery() {
		return k.rotate()
	}
	if k.expire() {
		k.apply()
	}
	return nil
}

// rotate is Rotate with k.mu held.
func (k *Keys) rotate() error {
	nk, err := fresh(k.now())
	if err != nil {
		return err
	}
	k.keys = append([]*key{nk}, k.keys...)
	k.expire()
	k.apply()
	return nil
}

// expire drops (and zeroes) the keys that stopped encrypting more than
// Lifetime ago, and any beyond MaxKeys; it reports whether it dropped any.
// The first key always stays. Called with k.mu held.
func (k *Keys) expire() bool {
	now, n := k.now(), len(k.keys)
	keep := 1
	for keep < len(k.keys) && keep < MaxKeys {
		// Key keep stopped encrypting when key keep-1 began.
		if now.Sub(k.keys[keep-1].created) > k.lifetime() {
			break
		}
		keep++
	}
	for _, old := range k.keys[keep:] {
		clear(old.b[:])
	}
	clear(k.keys[keep:])
	k.keys = k.keys[:keep]
	return keep < n
}

// Install makes cfg issue and accept session tickets with k's keys: it sets
// cfg.WrapSession and cfg.UnwrapSession (which crypto/tls calls for every
// ticket, TLS 1.2 and 1.3), so that cfg and every clone of it (as
// http.Server.ServeTLS makes) follow k's rotations, Refresh and Import
// included; a ticket is issued after a Refresh. It fails with ErrHooksSet if
// cfg has either hook already, and does not enable tickets that cfg disables
// (SessionTicketsDisabled). After Close, cfg issues tickets under keys of
// its own that nobody else has, and resumes none of k's.
func (k *Keys) Install(cfg *tls.Config) error {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if cfg.WrapSession != nil || cfg.UnwrapSession != nil {
		return ErrHooksSet
	}
	cfg.WrapSession = k.wrap
	cfg.UnwrapSession = k.unwrap
	return nil
}

// fallback issues the tickets of a config whose Keys are closed: under
// crypto/tls's own random keys, which no other process has.
var fallback = &tls.Config{}

// wrap is Install's WrapSession: it encrypts ss under the newest key (after
// a Refresh; if drawing a fresh key fails, the current one serves on).
func (k *Keys) wrap(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	if k.Refresh() != nil {
		k.mu.Lock()
		closed := k.closed
		k.mu.Unlock()
		if closed {
			return fallback.EncryptTicket(cs, ss)
		}
	}
	return k.inner.EncryptTicket(cs, ss)
}

// unwrap is Install's UnwrapSession: a ticket no key of k decrypts (or
// any, after Close) is no session (nil, nil): a full handshake follows.
func (k *Keys) unwrap(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	k.mu.Lock()
	closed := k.closed
	k.mu.Unlock()
	if closed {
		return nil, nil
	}
	return k.inner.DecryptTicket(identity, cs)
}

// apply sets the keys of the inner config. Called with k.mu held (or
// before k is shared).
func (k *Keys) apply() {
	ks := make([][32]byte, len(k.keys))
	for i, kk := range k.keys {
		ks[i] = kk.b
	}
	k.inner.SetSessionTicketKeys(ks) // crypto/tls derives its own copies
	clear(ks)
}

// adopt replaces k's keys with the predecessor's (theirs: newest first),
// zeroing k's own: the lineage goes on with the predecessor's key while it is
// young (see Refresh). Called by Import.
func (k *Keys) adopt(theirs []*key) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		for _, t := range theirs {
			clear(t.b[:])
		}
		return ErrClosed
	}
	for _, old := range k.keys {
		clear(old.b[:])
	}
	k.keys = theirs
	if k.now().Sub(k.keys[0].created) >= k.rotateEvery() {
		return k.rotate()
	}
	k.expire()
	k.apply()
	return nil
}

// Close zeroes every key and replaces what crypto/tls derived from them by
// a random key of no use to anyone (crypto/tls does not zero its copies: they
// are left to the garbage collector). Configs of Install go on without k (see
// Install). Safe to call more than once.
func (k *Keys) Close() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	for _, old := range k.keys {
		clear(old.b[:])
	}
	k.keys, k.closed = nil, true
	if junk, err := fresh(k.now()); err == nil {
		k.inner.SetSessionTicketKeys([][32]byte{junk.b})
		clear(junk.b[:])
	}
	return nil
}
