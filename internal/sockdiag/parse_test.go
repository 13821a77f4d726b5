//go:build linux

package sockdiag

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// nlmsg encodes one netlink message with a payload, padded to 4 bytes.
func nlmsg(typ, flags uint16, seq uint32, payload []byte) []byte {
	n := unix.SizeofNlMsghdr + len(payload)
	b := make([]byte, nlmAlign(n))
	native.PutUint32(b[0:], uint32(n))
	native.PutUint16(b[4:], typ)
	native.PutUint16(b[6:], flags)
	native.PutUint32(b[8:], seq)
	copy(b[unix.SizeofNlMsghdr:], payload)
	return b
}

// diagMsg encodes an inet_diag_msg for l, in state, followed by an attribute.
func diagMsg(l Listener, state uint8) []byte {
	m := make([]byte, sizeofDiagMsg, sizeofDiagMsg+8)
	m[0], m[1] = uint8(l.Family), state
	id := m[msgID:]
	binary.BigEndian.PutUint16(id[idSport:], l.Addr.Port())
	copy(id[idSrc:], l.Addr.Addr().AsSlice())
	native.PutUint32(id[idIf:], l.Interface)
	native.PutUint32(id[idCookie:], uint32(l.Cookie))
	native.PutUint32(id[idCookie+4:], uint32(l.Cookie>>32))
	native.PutUint32(m[msgRqueue:], l.Queue)
	native.PutUint32(m[msgWqueue:], l.Backlog)
	native.PutUint32(m[msgUID:], l.UID)
	native.PutUint32(m[msgInode:], uint32(l.Inode))
	return append(m, 8, 0, 1, 0, 0, 0, 0, 0) // an rtattr the parser must skip
}

func errno(e unix.Errno) []byte {
	return binary.NativeEndian.AppendUint32(nil, uint32(-int32(e)))
}

func TestRequest(t *testing.T) {
	b := requestStates(unix.AF_INET6, 8080, listenStates, 7)
	if len(b) != 72 || native.Uint32(b) != 72 || native.Uint16(b[4:]) != unix.SOCK_DIAG_BY_FAMILY ||
		native.Uint16(b[6:]) != unix.NLM_F_REQUEST|unix.NLM_F_DUMP || native.Uint32(b[8:]) != 7 {
		t.Fatalf("header % x", b[:16])
	}
	r := b[16:]
	if r[0] != unix.AF_INET6 || r[1] != unix.IPPROTO_TCP || native.Uint32(r[4:]) != 1<<10 ||
		r[8] != 8080>>8 || r[9] != 8080&0xff {
		t.Fatalf("inet_diag_req_v2 % x", r)
	}
}

func TestParse(t *testing.T) {
	v4 := Listener{Addr: netip.MustParseAddrPort("127.0.0.1:80"), Family: unix.AF_INET, Inode: 1<<32 - 1,
		UID: 1000, Queue: 3, Backlog: 4096, Cookie: 1<<40 | 5, Interface: 2}
	v6 := Listener{Addr: netip.MustParseAddrPort("[::ffff:10.0.0.1]:443"), Family: unix.AF_INET6, Inode: 9}
	var dgram []byte
	dgram = append(dgram, nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 4, diagMsg(v4, tcpListen))...)
	dgram = append(dgram, nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 3, diagMsg(v4, tcpListen))...) // stale
	dgram = append(dgram, nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 4, diagMsg(v4, 1))...)         // not listening
	dgram = append(dgram, nlmsg(unix.SOCK_DIAG_BY_FAMILY, unix.NLM_F_MULTI, 4, diagMsg(v6, tcpListen))...)

	ls, r, err := parse(dgram, 4, unix.AF_INET, 0, listenStates, nil)
	if err != nil || r.done || r.intr || len(ls) != 1 || ls[0] != v4 {
		t.Fatalf("inet: %+v %+v %v, want [%+v]", ls, r, err, v4)
	}
	ls, _, err = parse(dgram, 4, unix.AF_INET, 81, listenStates, nil)
	if err != nil || len(ls) != 0 {
		t.Fatalf("port 81: %+v %v, want none", ls, err)
	}
	done := nlmsg(unix.NLMSG_DONE, unix.NLM_F_MULTI|unix.NLM_F_DUMP_INTR, 4, errno(0))
	ls, r, err = parse(append(dgram, done...), 4, unix.AF_INET6, 0, listenStates, ls)
	if err != nil || !r.done || !r.intr || len(ls) != 1 || ls[0] != v6 {
		t.Fatalf("inet6: %+v %+v %v, want [%+v] done intr", ls, r, err, v6) // v6 unmapped nothing
	}
}

func TestParseErrors(t *testing.T) {
	good := nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 1, diagMsg(Listener{Family: unix.AF_INET,
		Addr: netip.MustParseAddrPort("0.0.0.0:1")}, tcpListen))
	for _, tt := range []struct {
		name  string
		dgram []byte
		errno unix.Errno // 0: errMalformed
	}{
		{"NLMSG_ERROR", nlmsg(unix.NLMSG_ERROR, 0, 1, errno(unix.EPERM)), unix.EPERM},
		{"NLMSG_DONE errno", nlmsg(unix.NLMSG_DONE, 0, 1, errno(unix.ENOBUFS)), unix.ENOBUFS},
		{"short NLMSG_ERROR", nlmsg(unix.NLMSG_ERROR, 0, 1, []byte{1}), 0},
		{"short header", good[:10], 0},
		{"length past end", good[:40], 0},
		{"length below header", append([]byte{8, 0, 0, 0}, good[4:]...), 0},
		{"short inet_diag_msg", nlmsg(unix.SOCK_DIAG_BY_FAMILY, 0, 1, make([]byte, 71)), 0},
		{"unknown type", nlmsg(99, 0, 1, nil), 0},
	} {
		_, _, err := parse(tt.dgram, 1, unix.AF_INET, 0, listenStates, nil)
		var se *os.SyscallError
		switch {
		case tt.errno == 0 && !errors.Is(err, errMalformed):
			t.Errorf("%s: %v, want errMalformed", tt.name, err)
		case tt.errno != 0 && (!errors.As(err, &se) || se.Syscall != "sock_diag" || se.Err != tt.errno):
			t.Errorf("%s: %#v, want *os.SyscallError{sock_diag, %v}", tt.name, err, tt.errno)
		}
	}
	// A DONE without payload and an ACK end the dump without error.
	for _, m := range [][]byte{nlmsg(unix.NLMSG_DONE, 0, 1, nil), nlmsg(unix.NLMSG_ERROR, 0, 1, errno(0))} {
		if _, r, err := parse(m, 1, unix.AF_INET, 0, listenStates, nil); err != nil || !r.done {
			t.Errorf("type %d: %+v %v, want done", native.Uint16(m[4:]), r, err)
		}
	}
}

func TestSocketInode(t *testing.T) {
	for link, want := range map[string]uint64{"socket:[12345]": 12345, "socket:[18446744073709551615]": 1<<64 - 1,
		"pipe:[12]": 0, "socket:[]": 0, "socket:[12": 0, "/dev/null": 0, "socket:[-1]": 0} {
		if got, ok := socketInode(link); got != want || ok != (want != 0) {
			t.Errorf("socketInode(%q) = %d, %v", link, got, ok)
		}
	}
}

func TestOwnersEmpty(t *testing.T) {
	owners, unreadable, err := Owners(nil)
	if err != nil || owners == nil || len(owners) != 0 || unreadable != nil {
		t.Fatalf("Owners(nil) = %v, %v, %v; want empty map", owners, unreadable, err)
	}
}
