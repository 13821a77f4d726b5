// Package chacha registers ChaCha20-Poly1305 with tlsresume, so that idle
// TLS 1.3 connections in TLS_CHACHA20_POLY1305_SHA256 are handed over with
// their session (drain.Server.TLSHandOver, zerodrop's Options.TLSHandoff)
// like those in AES-GCM. Import it for its side effect, in the predecessor
// and the successor alike:
//
//	import _ "github.com/zerodrop/zerodrop/tlsresume/chacha"
//
// The standard library keeps its ChaCha20-Poly1305 internal, so the AEAD
// comes from golang.org/x/crypto/chacha20poly1305, whose module brings
// x/net, x/term and x/text into the module graph; that is why this package
// is a module of its own: an application that does not import it downloads
// none of them, and its ChaCha20-Poly1305 connections are closed at a
// handoff as without the option (counted as not handed over; tlsresume
// returns an *UnsupportedSuiteError). Clients choose ChaCha20-Poly1305 when
// they lack AES hardware (many phones) or prefer it.
//
// Importing it registers chacha20poly1305.New with
// tlsresume.RegisterChaCha20Poly1305, which checks it against RFC 8439's
// test vector first. Its expanded key lives in x/crypto's state, which
// offers no erase (see tlsresume's Security section).
//
// # Platform
//
// Linux only, as all of zerodrop.
package chacha
