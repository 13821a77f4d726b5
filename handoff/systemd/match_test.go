package systemd

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

func TestMatches(t *testing.T) {
	tcp4 := passed{sock: reuseport.Socket{Family: unix.AF_INET, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_TCP, Listening: true,
		Addr: netip.MustParseAddrPort("127.0.0.1:8080")}}
	any6 := passed{sock: reuseport.Socket{Family: unix.AF_INET6, Type: unix.SOCK_STREAM, Protocol: unix.IPPROTO_MPTCP, Listening: true,
		Addr: netip.MustParseAddrPort("[::]:8080")}}
	udp4 := passed{sock: reuseport.Socket{Family: unix.AF_INET, Type: unix.SOCK_DGRAM, Protocol: unix.IPPROTO_UDP,
		Addr: netip.MustParseAddrPort("0.0.0.0:53")}}
	conn := tcp4
	conn.sock.Listening = false
	abstract := passed{sock: reuseport.Socket{Family: unix.AF_UNIX, Type: unix.SOCK_STREAM, Listening: true, Path: "@ctl"}}
	cases := []struct {
		p                passed
		network, address string
		ok               bool
	}{
		{tcp4, "tcp", "127.0.0.1:8080", true},
		{tcp4, "tcp4", "127.0.0.1:8080", true},
		{tcp4, "tcp6", "", false},
		{tcp4, "tcp", "[::ffff:127.0.0.1]:8080", true},
		{tcp4, "tcp", ":8080", false},
		{tcp4, "tcp", "127.0.0.1:8081", false},
		{tcp4, "udp", "", false},
		{tcp4, "", "127.0.0.1:8080", true},
		{tcp4, "tcp", "localhost:8080", false},
		{any6, "tcp", ":8080", true},
		{any6, "tcp6", "0.0.0.0:8080", true},
		{any6, "tcp", "[::]:8080", true},
		{any6, "tcp4", ":8080", false},
		{udp4, "udp", "127.0.0.1:53", false},
		{udp4, "udp4", "0.0.0.0:53", true},
		{udp4, "tcp", "", false},
		{conn, "tcp", "", false},
		{conn, "", "127.0.0.1:8080", true},
		{abstract, "unix", "@ctl", true},
		{abstract, "unix", "/run/ctl", false},
		{abstract, "unixgram", "@ctl", false},
	}
	for _, c := range cases {
		if err := c.p.matches(c.network, c.address); (err == nil) != c.ok {
			t.Errorf("%s matches(%q, %q) = %v, want ok=%v", &c.p.sock, c.network, c.address, err, c.ok)
		}
	}
}

func TestWatchdogInterval(t *testing.T) {
	for v, want := range map[string]time.Duration{"": 0, "1000000": time.Second, "5": 5 * time.Microsecond} {
		t.Setenv("WATCHDOG_USEC", v)
		if got, err := WatchdogInterval(); got != want || err != nil {
			t.Errorf("WATCHDOG_USEC=%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "1s"} {
		t.Setenv("WATCHDOG_USEC", v)
		if _, err := WatchdogInterval(); !errors.Is(err, ErrNotify) {
			t.Errorf("WATCHDOG_USEC=%q: %v, want ErrNotify", v, err)
		}
	}
	var n *Notifier
	if w := n.Pinger(context.Background(), time.Second); w != nil || w.Pings() != 0 || w.Err() != nil {
		t.Fatal("nil notifier pinged")
	}
}

func TestCheckOptions(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		ctx := context.Background()
		def := &reuseport.Config{}
		for _, network := range []string{"tcp4", "tcp"} {
			addr := map[string]string{"tcp4": "127.0.0.1:0", "tcp": "[::]:0"}[network]
			l, err := def.Listen(ctx, network, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := CheckOptions(ctx, l, def); err != nil {
				t.Errorf("%s %s against the config that made it: %v", network, addr, err)
			}
		}
		l, err := def.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		nodelay := &reuseport.Config{Options: reuseport.Options{NoDelay: true}}
		err = CheckOptions(ctx, l, nodelay)
		var me *reuseport.OptionMismatchError
		if !errors.Is(err, reuseport.ErrOptionMismatch) || !errors.As(err, &me) ||
			!reflect.DeepEqual(me.Diffs, []reuseport.OptionDiff{{Option: "TCP_NODELAY", Want: "1", Got: "0"}}) {
			t.Fatalf("NoDelay config against a default socket: %v", err)
		}
		if err := CheckOptions(ctx, l, nodelay, "TCP_NODELAY"); err != nil {
			t.Fatalf("with TCP_NODELAY ignored: %v", err)
		}

		// Go's own net.Listen makes MPTCP sockets (KERNEL.md): SO_PROTOCOL differs.
		ml, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ml.Close()
		if err := CheckOptions(ctx, ml.(*net.TCPListener), def); !errors.As(err, &me) || me.Diffs[0].Option != "SO_PROTOCOL" {
			t.Fatalf("MPTCP listener: %v, want SO_PROTOCOL first", err)
		}

		ul, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
		if err != nil {
			t.Fatal(err)
		}
		defer ul.Close()
		if err := CheckOptions(ctx, ul.(*net.UnixListener), def); !errors.Is(err, reuseport.ErrNotSupported) {
			t.Fatalf("unix listener: %v, want ErrNotSupported", err)
		}
	})
}
