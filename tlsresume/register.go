package tlsresume

import (
	"bytes"
	"crypto/cipher"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
)

// chachaKeySize is ChaCha20-Poly1305's key length (RFC 8439).
const chachaKeySize = 32

// chacha is the registered ChaCha20-Poly1305 constructor, if any.
var chacha atomic.Pointer[func(key []byte) (cipher.AEAD, error)]

// ErrBadAEAD is what RegisterChaCha20Poly1305 returns (wrapped) for a
// constructor that does not compute ChaCha20-Poly1305.
var ErrBadAEAD = errors.New("not a ChaCha20-Poly1305 AEAD")

// RegisterChaCha20Poly1305 makes TLS_CHACHA20_POLY1305_SHA256 usable by
// Recorder and Conn in this process, with newAEAD as its AEAD (for example
// golang.org/x/crypto/chacha20poly1305.New; importing
// github.com/zerodrop/zerodrop/tlsresume/chacha registers it). The standard
// library keeps its own ChaCha20-Poly1305 internal, and this module does not
// require x/crypto, so without a registration a ChaCha20-Poly1305 session
// is never handed over or continued: ProveIdleHTTP and New return an
// *UnsupportedSuiteError. The successor must register it too.
//
// newAEAD must pass RFC 8439's AEAD test vector (§2.8.2), or the
// registration is refused with an error wrapping ErrBadAEAD. Call it before
// the first connection (an init function); a later call replaces the
// constructor for the AEADs built from then on.
func RegisterChaCha20Poly1305(newAEAD func(key []byte) (cipher.AEAD, error)) error {
	if newAEAD == nil {
		return fmt.Errorf("register chacha20-poly1305: %w: nil constructor", ErrBadAEAD)
	}
	if err := checkChaCha(newAEAD); err != nil {
		return fmt.Errorf("register chacha20-poly1305: %w: %w", ErrBadAEAD, err)
	}
	chacha.Store(&newAEAD)
	return nil
}

// newChaCha builds the registered ChaCha20-Poly1305 AEAD.
func newChaCha(key []byte) (cipher.AEAD, error) {
	f := chacha.Load()
	if f == nil {
		return nil, &UnsupportedSuiteError{Suite: tls.TLS_CHACHA20_POLY1305_SHA256}
	}
	return (*f)(key)
}

// RFC 8439 §2.8.2's AEAD test vector.
const (
	kaKey   = "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f"
	kaNonce = "070000004041424344454647"
	kaAD    = "50515253c0c1c2c3c4c5c6c7"
	kaPlain = "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it."
	kaSeal  = "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d6" +
		"3dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b36" +
		"92ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc" +
		"3ff4def08e4b7a9de576d26586cec64b6116" +
		"1ae10b594f09e26a7e902ecbd0600691" // the tag
)

// checkChaCha checks that newAEAD computes RFC 8439's test vector, both
// ways, and refuses the vector with one bit changed.
func checkChaCha(newAEAD func(key []byte) (cipher.AEAD, error)) error {
	key, _ := hex.DecodeString(kaKey)
	nonce, _ := hex.DecodeString(kaNonce)
	ad, _ := hex.DecodeString(kaAD)
	want, _ := hex.DecodeString(kaSeal)
	a, err := newAEAD(key)
	if err != nil {
		return err
	}
	if a.NonceSize() != 12 || a.Overhead() != 16 {
		return fmt.Errorf("nonce of %d bytes, overhead %d; want 12 and 16", a.NonceSize(), a.Overhead())
	}
	if got := a.Seal(nil, nonce, []byte(kaPlain), ad); !bytes.Equal(got, want) {
		return errors.New("RFC 8439 test vector: wrong ciphertext")
	}
	if pt, err := a.Open(nil, nonce, want, ad); err != nil || string(pt) != kaPlain {
		return errors.New("RFC 8439 test vector: does not open")
	}
	want[0] ^= 1
	if _, err := a.Open(nil, nonce, want, ad); err == nil {
		return errors.New("RFC 8439 test vector: a changed ciphertext authenticates")
	}
	return nil
}
