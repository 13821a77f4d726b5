package tlsresume

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"hash"
)

// suite is what the record layer needs of a TLS 1.3 cipher suite.
type suite struct {
	id     uint16
	keyLen int
	hash   func() hash.Hash
	aead   func(key []byte) (cipher.AEAD, error)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// suites are TLS 1.3's three suites. ChaCha20-Poly1305's AEAD is not in
// the standard library's API: the suite is usable only once registered
// (RegisterChaCha20Poly1305); see available.
var suites = []suite{
	{tls.TLS_AES_128_GCM_SHA256, 16, sha256.New, newGCM},
	{tls.TLS_AES_256_GCM_SHA384, 32, sha512.New384, newGCM},
	{tls.TLS_CHACHA20_POLY1305_SHA256, chachaKeySize, sha256.New, newChaCha},
}

// available reports whether the suite's AEAD can be built in this process.
func (s *suite) available() bool {
	return s.id != tls.TLS_CHACHA20_POLY1305_SHA256 || chacha.Load() != nil
}

// suiteByID returns the TLS 1.3 suite id, or an *UnsupportedSuiteError if
// it is not one of TLS 1.3's, or its AEAD is not registered.
func suiteByID(id uint16) (*suite, error) {
	for i := range suites {
		if suites[i].id == id {
			if !suites[i].available() {
				break
			}
			return &suites[i], nil
		}
	}
	return nil, &UnsupportedSuiteError{Suite: id}
}

// secretLen is the length of a traffic secret of the suite: its hash's.
func (s *suite) secretLen() int { return s.hash().Size() }

// expandLabel is HKDF-Expand-Label(secret, label, "", n) of RFC 8446 §7.1.
func (s *suite) expandLabel(secret []byte, label string, n int) []byte {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // empty context
	out, err := hkdf.Expand(s.hash, secret, string(info), n)
	if err != nil {
		// Only a length above 255 hash blocks fails; ours are constants.
		panic(fmt.Sprintf("tlsresume: HKDF-Expand-Label %q: %v", label, err))
	}
	return out
}

// half is one direction of a record layer: the AEAD and IV of its current
// traffic secret (RFC 8446 §7.3), and the sequence number of the next record.
type half struct {
	suite  *suite
	secret []byte
	aead   cipher.AEAD
	iv     [12]byte
	seq    uint64
}

// newHalf keys a direction with secret (which it takes: zeroed by zero) at
// sequence number seq.
func newHalf(s *suite, secret []byte, seq uint64) (*half, error) {
	if len(secret) != s.secretLen() {
		return nil, fmt.Errorf("traffic secret of %d bytes, suite %#04x needs %d", len(secret), s.id, s.secretLen())
	}
	h := &half{suite: s, seq: seq}
	if err := h.setSecret(secret); err != nil {
		return nil, err
	}
	return h, nil
}

// setSecret derives key and IV from secret, zeroes the previous secret and
// the key, and keeps secret (for the next KeyUpdate).
func (h *half) setSecret(secret []byte) error {
	key := h.suite.expandLabel(secret, "key", h.suite.keyLen)
	iv := h.suite.expandLabel(secret, "iv", 12)
	defer clear(key)
	defer clear(iv)
	aead, err := h.suite.aead(key)
	if err != nil {
		return err
	}
	clear(h.secret)
	h.secret, h.aead = secret, aead
	copy(h.iv[:], iv)
	return nil
}

// update moves to the next generation of traffic secret (RFC 8446 §7.2,
// "traffic upd"), sequence number 0.
func (h *half) update() error {
	next := h.suite.expandLabel(h.secret, "traffic upd", h.suite.secretLen())
	if err := h.setSecret(next); err != nil {
		clear(next)
		return err
	}
	h.seq = 0
	return nil
}

// nonce is the per-record nonce: the IV XOR the sequence number, left-padded.
func (h *half) nonce() []byte {
	n := h.iv
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], h.seq)
	for i := range s {
		n[4+i] ^= s[i]
	}
	return n[:]
}

// zero erases the secret and IV. The AEAD's expanded key lives in the
// standard library's cipher state, which offers no erase (see the package
// doc); the half drops its reference to it.
func (h *half) zero() {
	clear(h.secret)
	h.secret = nil
	clear(h.iv[:])
	h.aead = nil
}
