package tlsresume

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// State is what a process needs to continue one direction pair of a TLS 1.3
// record layer: the cipher suite, the current application traffic secret
// and the sequence number of the next record in each direction, and the
// bytes already read from the socket that no record has consumed (the start
// of the peer's next record, still encrypted). Read is the peer's direction
// (for a server, the client's traffic secret), Write ours.
//
// A State holds secrets: Zero erases them; New takes them over.
type State struct {
	Suite       uint16
	ReadSecret  []byte
	WriteSecret []byte
	ReadSeq     uint64
	WriteSeq    uint64
	Unread      []byte
	// Plain is application data already decrypted and not consumed (a
	// Conn handed over again: what its reader had not taken); Read returns
	// it first.
	Plain []byte
	// ServerName and NegotiatedProtocol are the handshake's SNI and ALPN
	// results, for the successor's tls.ConnectionState (see
	// Conn.ConnectionState); not secret.
	ServerName         string
	NegotiatedProtocol string
}

// IsState reports whether b begins like a marshalled State (a handed-over
// connection's state bytes, not HTTP bytes read ahead: no request begins
// with the magic's control byte).
func IsState(b []byte) bool {
	return len(b) >= len(stateMagic) && string(b[:len(stateMagic)]) == stateMagic
}

// stateMagic starts a marshalled State: its format's name and version.
const stateMagic = "ZDTLS13\x01"

// maxUnread bounds State.Unread: the partial record a Recorder had read and
// what arrived while it was taken, two records at most (a State fits in a
// handoff frame's 64 KiB with room to spare).
const maxUnread = 2 * (recordHeaderLen + maxCiphertext)

// ErrBadState is a marshalled State that does not parse.
var ErrBadState = errors.New("malformed tls state")

// MarshalBinary encodes s: the magic, suite, sequence numbers, secrets and
// unread bytes, length-prefixed. The result holds the secrets in the clear:
// zero it after use (see "Security" in the package doc).
func (s *State) MarshalBinary() ([]byte, error) {
	if len(s.ReadSecret) > 255 || len(s.WriteSecret) > 255 || len(s.Unread) > maxUnread || len(s.Plain) > maxUnread || len(s.ServerName) > 255 || len(s.NegotiatedProtocol) > 255 {
		return nil, fmt.Errorf("marshal: %w: secret or unread bytes too long", ErrBadState)
	}
	b := make([]byte, 0, len(stateMagic)+2+16+2+len(s.ReadSecret)+len(s.WriteSecret)+4+len(s.Unread))
	b = append(b, stateMagic...)
	b = binary.BigEndian.AppendUint16(b, s.Suite)
	b = binary.BigEndian.AppendUint64(b, s.ReadSeq)
	b = binary.BigEndian.AppendUint64(b, s.WriteSeq)
	b = append(b, byte(len(s.ReadSecret)))
	b = append(b, s.ReadSecret...)
	b = append(b, byte(len(s.WriteSecret)))
	b = append(b, s.WriteSecret...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Unread)))
	b = append(b, s.Unread...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Plain)))
	b = append(b, s.Plain...)
	b = append(b, byte(len(s.ServerName)))
	b = append(b, s.ServerName...)
	b = append(b, byte(len(s.NegotiatedProtocol)))
	return append(b, s.NegotiatedProtocol...), nil
}

// UnmarshalBinary decodes b into s, copying what it keeps: the caller
// zeroes b. Errors wrap ErrBadState.
func (s *State) UnmarshalBinary(b []byte) error {
	bad := func(what string) error { return fmt.Errorf("unmarshal: %w: %s", ErrBadState, what) }
	if len(b) < len(stateMagic) || string(b[:len(stateMagic)]) != stateMagic {
		return bad("magic")
	}
	b = b[len(stateMagic):]
	if len(b) < 18 {
		return bad("short")
	}
	var t State
	t.Suite = binary.BigEndian.Uint16(b)
	t.ReadSeq = binary.BigEndian.Uint64(b[2:])
	t.WriteSeq = binary.BigEndian.Uint64(b[10:])
	b = b[18:]
	var ok bool
	if t.ReadSecret, b, ok = cutVec8(b); !ok {
		return bad("read secret")
	}
	if t.WriteSecret, b, ok = cutVec8(b); !ok {
		t.Zero()
		return bad("write secret")
	}
	if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) || binary.BigEndian.Uint32(b) > maxUnread {
		t.Zero()
		return bad("unread bytes")
	}
	n := int(binary.BigEndian.Uint32(b))
	t.Unread = append([]byte(nil), b[4:4+n]...)
	b = b[4+n:]
	if len(b) < 4 || uint64(len(b)-4) < uint64(binary.BigEndian.Uint32(b)) || binary.BigEndian.Uint32(b) > maxUnread {
		t.Zero()
		return bad("plaintext")
	}
	n = int(binary.BigEndian.Uint32(b))
	t.Plain = append([]byte(nil), b[4:4+n]...)
	b = b[4+n:]
	var sn, np []byte
	if sn, b, ok = cutVec8(b); !ok {
		t.Zero()
		return bad("server name")
	}
	if np, b, ok = cutVec8(b); !ok || len(b) != 0 {
		t.Zero()
		return bad("negotiated protocol")
	}
	t.ServerName, t.NegotiatedProtocol = string(sn), string(np)
	*s = t
	return nil
}

// cutVec8 cuts a vector with a one-byte length off b, copying it.
func cutVec8(b []byte) (v, rest []byte, ok bool) {
	if len(b) < 1 || len(b) < 1+int(b[0]) {
		return nil, b, false
	}
	n := int(b[0])
	return append([]byte(nil), b[1:1+n]...), b[1+n:], true
}

// Zero erases the secrets and the unread bytes.
func (s *State) Zero() {
	clear(s.ReadSecret)
	clear(s.WriteSecret)
	clear(s.Unread)
	clear(s.Plain)
	s.ReadSecret, s.WriteSecret, s.Unread, s.Plain = nil, nil, nil, nil
}
