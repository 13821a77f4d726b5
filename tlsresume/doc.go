// Package tlsresume continues a TLS 1.3 session in another process: the
// record layer (Conn) that a successor runs for a connection whose
// handshake its predecessor did, from the State (suite, application traffic
// secrets, sequence numbers, bytes read ahead) the predecessor handed over.
//
// # Record layer
//
// Conn protects application data with the standard AEADs: AES-128-GCM and
// AES-256-GCM (crypto/aes, crypto/cipher) and ChaCha20-Poly1305
// (golang.org/x/crypto/chacha20poly1305: the standard library keeps its
// copy internal). Keys and IVs are derived from the traffic secrets with
// HKDF-Expand-Label (RFC 8446 §7.1, §7.3; crypto/hkdf). Each record must
// authenticate at the next sequence number: a tampered, replayed, reordered
// or dropped record ends the connection with a bad_record_mac alert. A
// KeyUpdate from the peer moves its direction to the next secret, and one
// with update_requested makes Conn send its own (RFC 8446 §4.6.3); any other
// handshake message, or a record of another outer type, is answered with
// unexpected_message. close_notify reads as io.EOF; any other alert ends
// the connection (*AlertError).
//
// # Platform
//
// Linux only, as all of zerodrop.
package tlsresume
