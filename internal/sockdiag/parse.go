package sockdiag

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Layouts from include/uapi/linux/inet_diag.h. Netlink headers and most
// inet_diag fields are in host byte order; ports and addresses are big-endian.
const (
	tcpListen     = 10 // TCP_LISTEN, include/net/tcp_states.h
	tcpSynRecv    = 3  // TCP_SYN_RECV: how inet_diag reports a request socket
	tcpNewSynRecv = 12 // TCP_NEW_SYN_RECV: a request socket's own state

	listenStates    = 1 << tcpListen
	handshakeStates = 1<<tcpSynRecv | 1<<tcpNewSynRecv

	sizeofReqV2   = 56 // struct inet_diag_req_v2
	sizeofDiagMsg = 72 // struct inet_diag_msg

	// Offsets of struct inet_diag_sockid fields, relative to the sockid.
	idSport  = 0
	idSrc    = 4
	idIf     = 36
	idCookie = 40

	reqID = 8 // sockid in inet_diag_req_v2
	msgID = 4 // sockid in inet_diag_msg

	msgRqueue = 56
	msgWqueue = 60
	msgUID    = 64
	msgInode  = 68
)

var native = binary.NativeEndian

// requestStates encodes an nlmsghdr and an inet_diag_req_v2 asking for a
// dump of the TCP sockets of family in states (a bit per state), on port if
// it is not 0.
func requestStates(family uint8, port uint16, states, seq uint32) []byte {
	b := make([]byte, unix.SizeofNlMsghdr+sizeofReqV2)
	native.PutUint32(b[0:], uint32(len(b)))
	native.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	native.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	native.PutUint32(b[8:], seq)
	// nlmsg_pid 0: the kernel fills in our port ID.
	r := b[unix.SizeofNlMsghdr:]
	r[0] = family
	r[1] = unix.IPPROTO_TCP
	native.PutUint32(r[4:], states)
	// The kernel skips listeners on other ports when idiag_sport is set.
	binary.BigEndian.PutUint16(r[reqID+idSport:], port)
	return b
}

// result is what one datagram says about the state of the dump.
type result struct {
	done bool // NLMSG_DONE seen
	intr bool // NLM_F_DUMP_INTR seen: the dump may be inconsistent
}

// parse appends to ls the sockets in states in one datagram of the dump with
// sequence number seq. Messages of other sequence numbers are stale and skipped.
func parse(b []byte, seq uint32, family uint8, port uint16, states uint32, ls []Listener) ([]Listener, result, error) {
	var r result
	for len(b) > 0 && !r.done {
		if len(b) < unix.SizeofNlMsghdr {
			return nil, r, fmt.Errorf("%w: %d trailing bytes", errMalformed, len(b))
		}
		n := int(native.Uint32(b[0:]))
		typ, flags, mseq := native.Uint16(b[4:]), native.Uint16(b[6:]), native.Uint32(b[8:])
		if n < unix.SizeofNlMsghdr || n > len(b) {
			return nil, r, fmt.Errorf("%w: nlmsg_len %d, %d bytes left", errMalformed, n, len(b))
		}
		body := b[unix.SizeofNlMsghdr:n]
		b = b[min(nlmAlign(n), len(b)):]
		if mseq != seq {
			continue
		}
		r.intr = r.intr || flags&unix.NLM_F_DUMP_INTR != 0
		switch typ {
		case unix.NLMSG_NOOP:
		case unix.NLMSG_DONE:
			r.done = true
			if err := errnoIn(body, false); err != nil {
				return nil, r, err
			}
		case unix.NLMSG_ERROR:
			if err := errnoIn(body, true); err != nil {
				return nil, r, err
			}
			r.done = true // an ACK (error 0) ends the exchange too
		case unix.SOCK_DIAG_BY_FAMILY:
			l, ok, err := decode(body, family, port, states)
			if err != nil {
				return nil, r, err
			}
			if ok {
				ls = append(ls, l)
			}
		default:
			return nil, r, fmt.Errorf("%w: unexpected nlmsg_type %d", errMalformed, typ)
		}
	}
	return ls, r, nil
}

// errnoIn reads the int at the start of an NLMSG_ERROR (required) or
// NLMSG_DONE (optional) payload: 0 or a negative errno.
func errnoIn(body []byte, required bool) error {
	if len(body) < 4 {
		if required {
			return fmt.Errorf("%w: NLMSG_ERROR of %d bytes", errMalformed, len(body))
		}
		return nil
	}
	if e := int32(native.Uint32(body)); e < 0 {
		return os.NewSyscallError("sock_diag", unix.Errno(-e))
	}
	return nil
}

// decode reads one struct inet_diag_msg (attributes after it are ignored).
// ok is false for a socket the request did not ask for.
func decode(m []byte, family uint8, port uint16, states uint32) (l Listener, ok bool, err error) {
	if len(m) < sizeofDiagMsg {
		return l, false, fmt.Errorf("%w: inet_diag_msg of %d bytes", errMalformed, len(m))
	}
	id := m[msgID:]
	sport := binary.BigEndian.Uint16(id[idSport:])
	if m[0] != family || m[1] >= 32 || states&(1<<m[1]) == 0 || (port != 0 && sport != port) {
		return l, false, nil
	}
	var addr netip.Addr
	if family == unix.AF_INET {
		addr = netip.AddrFrom4([4]byte(id[idSrc : idSrc+4]))
	} else {
		addr = netip.AddrFrom16([16]byte(id[idSrc : idSrc+16]))
	}
	return Listener{
		Addr:      netip.AddrPortFrom(addr, sport),
		Family:    int(family),
		Inode:     uint64(native.Uint32(m[msgInode:])),
		UID:       native.Uint32(m[msgUID:]),
		Queue:     native.Uint32(m[msgRqueue:]),
		Backlog:   native.Uint32(m[msgWqueue:]),
		Cookie:    uint64(native.Uint32(id[idCookie:])) | uint64(native.Uint32(id[idCookie+4:]))<<32,
		Interface: native.Uint32(id[idIf:]),
	}, true, nil
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }
