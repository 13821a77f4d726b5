package reuseport_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// ReadSocket says what a socket is, whoever made it, and a Listener made
// elsewhere (net.Listen's MPTCP socket here) has its digest as a
// reuseport.Listener has.
func TestReadSocket(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		l := listen(t, &reuseport.Config{Options: reuseport.Options{Backlog: 64}}, "127.0.0.1:0")
		s := l.Socket()
		if s.Family != unix.AF_INET || s.Type != unix.SOCK_STREAM || s.Protocol != unix.IPPROTO_TCP || !s.Listening ||
			s.Addr.String() != l.Addr().String() || s.Cookie == 0 || s.Network() != "tcp4" {
			t.Fatalf("Listen's socket: %+v", s)
		}
		d := s.Digest
		if d.Family() != unix.AF_INET || d.Type() != unix.SOCK_STREAM || d.Protocol() != unix.IPPROTO_TCP || d.Backlog() != 64 || s.Effective.Backlog != 64 {
			t.Fatalf("digest accessors: family %d type %d protocol %d backlog %d", d.Family(), d.Type(), d.Protocol(), d.Backlog())
		}
		if v, ok := d.Value("SO_REUSEPORT"); !ok || v != "1" {
			t.Fatalf("SO_REUSEPORT = %q %v", v, ok)
		}

		p, err := reuseport.ListenPacket(ctx, "udp6", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if s := p.Socket(); s.Network() != "udp6" || s.Listening || s.Digest.Type() != unix.SOCK_DGRAM || s.String() != "udp6:"+p.LocalAddr().String() {
			t.Fatalf("ListenPacket's socket: %+v (%s)", s, s)
		}

		path := filepath.Join(t.TempDir(), "s")
		ul, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		us, err := reuseport.ReadSocket(ul.(*net.UnixListener))
		if err != nil || us.Network() != "unix" || us.Path != path || !us.Listening || us.Digest.Values != nil {
			t.Fatalf("unix listener: %+v, %v", us, err)
		}
		if _, err := reuseport.ReadDigest(ul.(*net.UnixListener)); !errors.Is(err, reuseport.ErrNotSupported) {
			t.Fatalf("ReadDigest of a unix listener: %v, want ErrNotSupported", err)
		}

		ml, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		rl, err := reuseport.NewListener(ml.(*net.TCPListener), nil)
		if err != nil {
			ml.Close()
			t.Fatal(err)
		}
		if rl.Socket().Protocol != unix.IPPROTO_MPTCP || rl.Digest().Backlog() == 0 || rl.Adjustments() != nil {
			t.Fatalf("NewListener of net.Listen's socket: %+v", rl.Socket())
		}
		rl.Close()
		if _, err := reuseport.NewPacketConn(&net.UDPConn{}, us); !errors.Is(err, reuseport.ErrNotSupported) {
			t.Fatalf("NewPacketConn with a unix socket's description: %v, want ErrNotSupported", err)
		}
	})
}

// Check is the one option check: every option equal, and the backlog what
// the Config asks, clamped to somaxconn.
func TestCheck(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		def := &reuseport.Config{}
		l := listen(t, def, "127.0.0.1:0")
		if err := def.Check("tcp4", l.Socket()); err != nil {
			t.Fatalf("against the config that made it: %v", err)
		}
		big := &reuseport.Config{Options: reuseport.Options{Backlog: 1 << 20}} // clamped to somaxconn, as listen(2) does
		if err := big.Check("tcp4", l.Socket()); err != nil {
			t.Fatalf("a backlog above somaxconn: %v", err)
		}
		small := &reuseport.Config{Options: reuseport.Options{Backlog: 16, NoDelay: true}}
		err := small.Check("tcp4", l.Socket())
		var mm *reuseport.OptionMismatchError
		if !errors.Is(err, reuseport.ErrOptionMismatch) || !errors.As(err, &mm) ||
			!reflect.DeepEqual(mm.Options(), []string{"TCP_NODELAY", "backlog"}) || mm.Diffs[1].Want != "16" {
			t.Fatalf("backlog 16 and NoDelay against a default socket: %v", err)
		}
		if err := small.Check("tcp4", l.Socket(), "TCP_NODELAY", "backlog"); err != nil {
			t.Fatalf("with both ignored: %v", err)
		}
		if err := def.Check("unix", &reuseport.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM}); !errors.Is(err, reuseport.ErrNotSupported) || !strings.Contains(err.Error(), "unix") {
			t.Fatalf("a unix socket: %v, want ErrNotSupported", err)
		}
	})
}

// The version 1 hash covers the first release's option table only, so that
// a predecessor or successor of that release agrees once the table grows;
// CompareDeclared ignores options only one side knows.
func TestLegacyDigest(t *testing.T) {
	d := reuseport.Digest{Values: []reuseport.OptionValue{{"SO_DOMAIN", "inet"}, {"SO_TYPE", "stream"}, {"backlog", "4096"}, {"TCP_CONGESTION", "cubic"}}}
	grown := reuseport.Digest{Values: append(append([]reuseport.OptionValue(nil), d.Values...), reuseport.OptionValue{"SO_FROM_THE_FUTURE", "1"})}
	if d.LegacyString() != d.String() || grown.LegacyString() != d.String() || grown.String() == d.String() {
		t.Fatalf("legacy %s %s, full %s %s", d.LegacyString(), grown.LegacyString(), d.String(), grown.String())
	}
	if err := d.CompareDeclared(grown.Map()); err != nil {
		t.Fatalf("an option we do not read: %v", err)
	}
	m := d.Map()
	m["TCP_CONGESTION"] = "bbr"
	var mm *reuseport.OptionMismatchError
	if err := d.CompareDeclared(m); !errors.As(err, &mm) || len(mm.Diffs) != 1 || mm.Diffs[0] != (reuseport.OptionDiff{Option: "TCP_CONGESTION", Want: "bbr", Got: "cubic"}) {
		t.Fatalf("a different value: %v", err)
	}
}
