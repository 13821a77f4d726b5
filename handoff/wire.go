package handoff

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"unicode/utf8"

	"github.com/zerodrop/zerodrop/sockets"
)

// The wire protocol (version 2).
//
// A SOCK_STREAM unix socket. Each frame is a 4-byte big-endian payload length
// (1 to 1 MiB; a longer header is an error, not a read) followed by one JSON
// object whose "type" says which fields it carries. Every read and write has
// a deadline (Config.Timeout; the wait for ready has Config.ReadyTimeout). fds
// travel only with "fds" frames, as one SCM_RIGHTS control message of at most
// 253 (SCM_MAX_FD) fds sent with the frame's first byte; the receiver reads each
// frame exactly (never past its end), with MSG_CMSG_CLOEXEC, and treats fds on
// any other frame, more fds than announced, or MSG_CTRUNC as an error. The
// successor S connects to the predecessor P:
//
//	S -> P  {"type":"hello","version":1,"max_version":2,"role":"successor","pid":..,"uid":..}
//	P -> S  {"type":"hello","version":V,"role":"predecessor","pid":..,"uid":..,"generation":G}
//	P -> S  {"type":"offer","sockets":[{"name":"http","kind":"tcp-listener",
//	         "network":"tcp4","address":"127.0.0.1:8080","digest":"sha256:.."},..]}
//	for each batch of up to 253 sockets, in offer order:
//	P -> S  {"type":"fds","first":F,"count":K} + SCM_RIGHTS with exactly K fds
//	S -> P  {"type":"ack","received":F+K}
//	if the offer carried "tickets":true (S asked with "tickets":true in its hello):
//	P -> S  {"type":"tickets","count":1} + SCM_RIGHTS with one sealed memfd
//	if both hellos carried "handoff":true:
//	P -> S  {"type":"handoff","sockets":[{"name":"handoff","kind":"unix-listener",
//	         "network":"unix","address":"@name" or "<dir>/.<base>.<pid>.tmp"}]}
//	         + SCM_RIGHTS with P's handoff listening socket
//	... S starts serving, then:
//	S -> P  {"type":"ready","generation":G+1,"takes":["http",..]}   ("takes" in version 2 only)
//	P -> S  {"type":"done","generation":G+1}   (P has stopped accepting on the handoff socket)
//	version 2, if "takes" named listeners: the conversation stays open, and
//	for each batch of up to 253 connections P passes:
//	P -> S  {"type":"conns","first":F,"count":K,"conns":[{"name":"http","kind":"tcp-conn",
//	         "network":"tcp4","address":"127.0.0.1:8080","peer":"127.0.0.1:40000",
//	         "state":"<base64>"},..]} + SCM_RIGHTS with exactly K fds
//	S -> P  {"type":"ack","received":F+K}
//	... until P closes the conversation (it has passed what it had).
//
// Versions: every hello says "version":1, the version all releases speak,
// because a version 1 predecessor refuses any other and counts that as a
// failed handoff; a successor that speaks more says so in "max_version",
// and the predecessor answers with the highest version both speak. A
// version 1 predecessor refuses the unknown key "max_version" ("protocol",
// naming it, before anything else; not counted as a failure) and the
// successor says hello again without it: listeners pass, connections are
// not passed (the predecessor drains them as before). A version 1 successor
// sends no "max_version" and is answered in version 1. A "conns" batch
// carries at most 512 KiB of state in all, each connection at most
// MaxConnState bytes.
//
// Kinds are "tcp-listener" (network tcp, tcp4, tcp6), "udp" (udp, udp4, udp6)
// and "unix-listener" (network unix; no digest) in offers, and "tcp-conn"
// (tcp, tcp4, tcp6) in conns frames only. Names are unique, 1 to 255
// bytes of UTF-8; an offer lists at most 4096 sockets. Either side may instead
// send {"type":"error","code":C,"message":M} and close; C is "version",
// "in_progress" (P is handing over, or has handed over, to another
// successor: ErrHandoffInProgress),
// "busy" (P holds as many conversations or buffered bytes as it may: ErrBusy),
// "permission", "protocol", "validation" or "internal". A peer speaking another
// version gets code "version". An observer (see Observe, Upgrade) sends a hello
// with "role":"observer" and receives P's hello, which then also carries
// "failures" (successors refused for their version, or whose transfer failed)
// and "last_error". A successor's and a predecessor's hello carry
// "handoff":true: the successor takes the handoff socket, the predecessor
// sends it. The key belongs to the version 1 hello from this release on;
// releases before it (which ignored unknown keys) omit it, and then the
// handoff socket is neither sent nor expected and the successor binds its own
// at Ready as before, so upgrades across the change work in both directions
// (only they keep the old window). Fields whose value is zero are omitted ("uid" of root,
// "generation" 0, "first" 0). A successor of this release also says
// "options":true in its hello; the offer it gets then carries
// "option_sets":{"<digest>":{"SO_REUSEPORT":"1",...}}, each inet socket's
// option values keyed by name, once per distinct digest, and each socket's
// "digest" names its set: the successor compares the options both releases
// read, so a release that adds an option to reuseport's table still hands
// over to and from this one. A successor without the key gets the version 1
// offer ("digest" is the hash over the first release's option table,
// reuseport.Digest.LegacyString). A predecessor of the release before refuses
// the key ("protocol", naming it; not counted as a failure), and the
// successor says hello again without it. "tickets" works the same way: a
// successor with Config.TicketKeys says "tickets":true; a predecessor of a
// release before refuses the key and gets a hello without it (no keys pass,
// clients do a full handshake after the restart, as before); a predecessor
// of this release answers an older successor, which never asks, without
// keys. A predecessor without TicketKeys sends an offer without "tickets",
// and the successor keeps its own keys; an offer with "tickets" to a
// successor that did not ask is a protocol error. Keys are matched exactly (case-sensitively), and
// a key that is unknown or repeated, in a frame or an offered socket, is a
// protocol error: the hello's keys are therefore the same in every version,
// so that a peer of another version is told "version". No frame may carry
// generation 2^64-1 (its successor's would wrap to 0). The generation in the
// successor's hello is informational (0); pid and uid in hellos are
// informational too: each side trusts only the kernel's credentials
// (SO_PEERCRED, SCM_CREDENTIALS).

// Protocol constants: the limits of the wire protocol (described in wire.go).
const (
	// Version is the highest protocol version this package speaks. Version
	// 2 adds connected sockets ("conns" frames after done); see the wire
	// protocol (wire.go) for how two releases agree on a version.
	Version = 2
	// MaxFrame is the largest frame payload accepted, in bytes.
	MaxFrame = 1 << 20
	// MaxSockets is the largest number of sockets one offer may declare.
	MaxSockets = 4096
	// BatchFDs is the most fds sent in one SCM_RIGHTS message (SCM_MAX_FD).
	BatchFDs = 253
	// MaxConnState is the most state bytes one passed connection may carry.
	MaxConnState = 64 << 10

	headerLen = 4
	maxName   = 255
	maxAddr   = 255
)

// Frame types.
const (
	typeHello = "hello"
	typeOffer = "offer"
	typeFDs   = "fds"
	typeAck   = "ack"
	typeReady = "ready"
	typeDone  = "done"
	typeError = "error"
	// typeConns carries connected sockets (version 2), after done: one
	// batch of up to BatchFDs fds, declared in Conns, acked like fds.
	typeConns = "conns"
	// typeTickets carries the TLS session-ticket keys (one fd: a sealed
	// memfd of ticket.Keys.Export), after the fd batches, when the
	// successor asked for them (hello "tickets") and the offer says so.
	typeTickets = "tickets"
	// typeHandoff carries the predecessor's handoff listening socket itself
	// (one fd, declared in Sockets), so that the handoff name stays bound.
	typeHandoff = "handoff"
)

// Roles announced in hello.
const (
	roleSuccessor   = "successor"
	roleObserver    = "observer"
	rolePredecessor = "predecessor"
	// roleSibling is a process passing connections to a ConnListener.
	roleSibling = "sibling"
)

// Socket kinds: the socket table's (package sockets), and connections.
const (
	kindTCP  = string(sockets.TCP)
	kindUDP  = string(sockets.UDP)
	kindUnix = string(sockets.Unix)
	// kindTCPConn is a connected TCP socket (version 2): a connection
	// passed to the successor, declared in a conns frame.
	kindTCPConn = "tcp-conn"
)

// frame is one decoded message; which fields are set depends on Type.
type frame struct {
	Type string `json:"type"`
	// hello
	Version int `json:"version,omitempty"`
	// MaxVersion in a successor's hello: the highest version it speaks,
	// when above Version (a predecessor of version 1 refuses the key, and
	// the successor says hello again without it). A predecessor answers
	// with the version both speak.
	MaxVersion int    `json:"max_version,omitempty"`
	Role       string `json:"role,omitempty"`
	PID        int    `json:"pid,omitempty"`
	UID        uint32 `json:"uid,omitempty"`
	Generation uint64 `json:"generation,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	Failures   uint64 `json:"failures,omitempty"`
	// Handoff in a successor's hello: it takes the handoff socket itself;
	// in a predecessor's: it sends it (a "handoff" frame after the fds).
	Handoff bool `json:"handoff,omitempty"`
	// Options in a successor's hello: it reads option values, so the offer
	// may carry OptionSets (a predecessor of an older release refuses the
	// key, and the successor says hello again without it).
	Options bool `json:"options,omitempty"`
	// Tickets in a successor's hello: it takes TLS session-ticket keys (a
	// predecessor of an older release refuses the key, and the successor
	// says hello again without it); in an offer: a tickets frame follows
	// the fd batches.
	Tickets bool `json:"tickets,omitempty"`
	// OptionSets in an offer: the option values of the offered inet
	// sockets, keyed by name, one set per distinct digest, keyed by it.
	OptionSets map[string]map[string]string `json:"option_sets,omitempty"`
	// offer; handoff: the one handoff socket
	Sockets []socketInfo `json:"sockets,omitempty"`
	// fds, conns: First is the index in the offer (or among the
	// connections passed) of the first fd of this batch.
	First int `json:"first,omitempty"`
	Count int `json:"count,omitempty"`
	// conns: the connected sockets of the batch, in fd order.
	Conns []connDecl `json:"conns,omitempty"`
	// Takes in a ready frame (version 2), or a sibling receiver's hello: the
	// names of the listeners whose connections it takes; none means none.
	Takes []string `json:"takes,omitempty"`
	// ack
	Received int `json:"received,omitempty"`
	// error
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// socketInfo is one offered socket.
type socketInfo struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Network string `json:"network"`
	Address string `json:"address"`
	Digest  string `json:"digest,omitempty"`
}

// connDecl is one connected socket as its sender declares it: Name is the
// listener it was accepted on, Address the local address, Peer the remote
// one, State opaque bytes for the receiver's handler (for HTTP, the bytes
// read from the connection but not consumed, which precede what the socket
// holds).
type connDecl struct {
	socketInfo
	Peer  string `json:"peer"`
	State []byte `json:"state,omitempty"`
}

// encodeFrame returns the header and payload of f.
func encodeFrame(f *frame) ([]byte, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	if len(body) > MaxFrame {
		return nil, &FrameError{Err: ErrFrameTooLarge, Detail: fmt.Sprintf("%d bytes", len(body))}
	}
	b := make([]byte, headerLen, headerLen+len(body))
	binary.BigEndian.PutUint32(b, uint32(len(body)))
	return append(b, body...), nil
}

// frameLen parses a header.
func frameLen(h []byte) (int, error) {
	n := binary.BigEndian.Uint32(h)
	if n > MaxFrame {
		return 0, &FrameError{Err: ErrFrameTooLarge, Detail: fmt.Sprintf("header announces %d bytes, limit %d", n, MaxFrame)}
	}
	if n == 0 {
		return 0, &FrameError{Err: ErrProtocol, Detail: "empty frame"}
	}
	return int(n), nil
}

// decode parses a whole frame, header included, and checks its fields.
func decode(b []byte) (*frame, error) {
	if len(b) < headerLen {
		return nil, &FrameError{Err: ErrTruncated, Detail: fmt.Sprintf("%d header bytes", len(b))}
	}
	n, err := frameLen(b[:headerLen])
	if err != nil {
		return nil, err
	}
	if len(b)-headerLen != n {
		return nil, &FrameError{Err: ErrTruncated, Detail: fmt.Sprintf("header announces %d bytes, got %d", n, len(b)-headerLen)}
	}
	return decodeBody(b[headerLen:])
}

// decodeBody parses and checks a frame payload. Keys must be the fields'
// names exactly, each at most once: encoding/json alone would match them
// case-insensitively and let the last of two keys win.
func decodeBody(body []byte) (*frame, error) {
	var f frame
	if err := checkKeys(body); err != nil {
		if _, shape := err.(keyError); !shape {
			err = fmt.Errorf("bad json: %w", err)
		}
		return nil, &FrameError{Err: ErrProtocol, Detail: err.Error()}
	}
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, &FrameError{Err: ErrProtocol, Detail: "bad json: " + err.Error()}
	}
	if err := f.check(); err != nil {
		return nil, &FrameError{Type: f.Type, Err: ErrProtocol, Detail: err.Error()}
	}
	return &f, nil
}

// The keys a frame and an offered socket may carry: their json names.
var (
	frameKeys  = jsonKeys(reflect.TypeFor[frame]())
	socketKeys = jsonKeys(reflect.TypeFor[socketInfo]())
	connKeys   = jsonKeys(reflect.TypeFor[connDecl]())
)

// checkKeys refuses a payload whose object, or an object in its "sockets"
// or "conns" list, has a key that is not one of its fields' names (compared
// exactly, after JSON unescaping) or has a key twice. Values are checked by
// json.Unmarshal afterwards.
func checkKeys(body []byte) error {
	d := json.NewDecoder(bytes.NewReader(body))
	return objectKeys(d, frameKeys, func(key string) error {
		elemKeys := map[string]map[string]bool{"sockets": socketKeys, "conns": connKeys}[key]
		if elemKeys == nil {
			return skipValue(d)
		}
		return eachElement(d, func() error {
			return objectKeys(d, elemKeys, func(string) error { return skipValue(d) })
		})
	})
}

// check validates the fields a frame of its type must have.
func (f *frame) check() error {
	if f.Generation == math.MaxUint64 {
		return fmt.Errorf("generation %d: the next one would wrap to 0", f.Generation)
	}
	switch f.Type {
	case typeHello:
		if f.Role != roleSuccessor && f.Role != roleObserver && f.Role != rolePredecessor && f.Role != roleSibling {
			return fmt.Errorf("unknown role %q", f.Role)
		}
		if f.PID <= 0 {
			return fmt.Errorf("pid %d", f.PID)
		}
		if f.MaxVersion != 0 && f.MaxVersion <= f.Version {
			return fmt.Errorf("max_version %d not above version %d", f.MaxVersion, f.Version)
		}
		if len(f.Takes) > MaxSockets {
			return fmt.Errorf("hello takes %d listeners, limit %d", len(f.Takes), MaxSockets)
		}
	case typeOffer:
		if len(f.Sockets) > MaxSockets {
			return fmt.Errorf("%d sockets, limit %d", len(f.Sockets), MaxSockets)
		}
		seen := make(map[string]bool, len(f.Sockets))
		for _, s := range f.Sockets {
			if err := s.check(); err != nil {
				return err
			}
			if s.Kind == kindTCPConn {
				return fmt.Errorf("socket %q: a connection in an offer", s.Name)
			}
			if seen[s.Name] {
				return fmt.Errorf("socket name %q offered twice", s.Name)
			}
			seen[s.Name] = true
		}
	case typeFDs:
		if f.Count < 1 || f.Count > BatchFDs || f.First < 0 || f.First > MaxSockets {
			return fmt.Errorf("fds batch first=%d count=%d", f.First, f.Count)
		}
	case typeConns:
		if f.Count < 1 || f.Count > BatchFDs || f.First < 0 || len(f.Conns) != f.Count {
			return fmt.Errorf("conns batch first=%d count=%d declaring %d", f.First, f.Count, len(f.Conns))
		}
		state := 0
		for i := range f.Conns {
			if err := f.Conns[i].check(); err != nil {
				return err
			}
			state += len(f.Conns[i].State)
		}
		if state > MaxFrame/2 {
			return fmt.Errorf("conns batch carries %d state bytes, limit %d", state, MaxFrame/2)
		}
	case typeTickets:
		if f.Count != 1 {
			return fmt.Errorf("tickets frame declares %d fds, want 1", f.Count)
		}
	case typeAck:
		if f.Received < 0 {
			return fmt.Errorf("ack of %d", f.Received)
		}
	case typeHandoff:
		if len(f.Sockets) != 1 || f.Sockets[0].Kind != kindUnix {
			return fmt.Errorf("handoff frame declares %d sockets, want one unix listener", len(f.Sockets))
		}
		return f.Sockets[0].check()
	case typeReady:
		if len(f.Takes) > MaxSockets {
			return fmt.Errorf("ready takes %d listeners, limit %d", len(f.Takes), MaxSockets)
		}
	case typeDone:
	case typeError:
		if f.Code == "" {
			return fmt.Errorf("error frame without code")
		}
	default:
		return fmt.Errorf("unknown frame type %q", f.Type)
	}
	return nil
}

func (s *socketInfo) check() error {
	if s.Name == "" || len(s.Name) > maxName || !utf8.ValidString(s.Name) {
		return fmt.Errorf("bad socket name %q", s.Name)
	}
	if len(s.Address) > maxAddr || len(s.Digest) > 64 {
		return fmt.Errorf("socket %q: address or digest too long", s.Name)
	}
	ok := false
	switch s.Kind {
	case kindTCP, kindTCPConn:
		ok = s.Network == "tcp" || s.Network == "tcp4" || s.Network == "tcp6"
	case kindUDP:
		ok = s.Network == "udp" || s.Network == "udp4" || s.Network == "udp6"
	case kindUnix:
		ok = s.Network == "unix"
	}
	if !ok {
		return fmt.Errorf("socket %q: kind %q with network %q", s.Name, s.Kind, s.Network)
	}
	return nil
}

func (d *connDecl) check() error {
	if d.Kind != kindTCPConn {
		return fmt.Errorf("connection %q: kind %q", d.Name, d.Kind)
	}
	if len(d.Peer) > maxAddr || len(d.State) > MaxConnState {
		return fmt.Errorf("connection %q: peer address or state too long (%d state bytes, limit %d)", d.Name, len(d.State), MaxConnState)
	}
	return d.socketInfo.check()
}

// expect turns an error frame into a *RemoteError and an unexpected frame
// into a protocol error.
func expect(f *frame, typ string) error {
	switch f.Type {
	case typ:
		return nil
	case typeError:
		return &RemoteError{Code: f.Code, Message: f.Message}
	}
	return &FrameError{Type: f.Type, Err: ErrProtocol, Detail: "expected " + typ}
}
