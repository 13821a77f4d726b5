package reuseport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"
)

func TestDigest(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		cfg := reuseport.Config{Options: reuseport.Options{Backlog: 64, NoDelay: true,
			KeepAlive: reuseport.KeepAlive{Enable: true, Idle: 30e9, Interval: 5e9, Count: 4}}}
		a := listen(t, &cfg, "127.0.0.1:0")
		b := listen(t, &cfg, a.Addr().String())
		if err := a.Digest().Compare(b.Digest()); err != nil {
			t.Fatalf("same Config, different digests: %v", err)
		}
		if a.Digest().String() != b.Digest().String() {
			t.Fatalf("hashes differ: %s %s", a.Digest(), b.Digest())
		}
		for opt, mod := range map[string]func(*reuseport.Config){
			"TCP_SAVE_SYN":     func(c *reuseport.Config) { c.Options.SaveSYN = true },
			"TCP_DEFER_ACCEPT": func(c *reuseport.Config) { c.Options.DeferAccept = 5e9 },
		} {
			c := cfg
			mod(&c)
			other := listen(t, &c, a.Addr().String())
			err := a.Digest().Compare(other.Digest())
			var me *reuseport.OptionMismatchError
			if !errors.Is(err, reuseport.ErrOptionMismatch) || !errors.As(err, &me) {
				t.Fatalf("%s: Compare = %v, want *OptionMismatchError", opt, err)
			}
			if got := me.Options(); !slices.Equal(got, []string{opt}) {
				t.Fatalf("mismatch names %v, want exactly [%s]: %v", got, opt, err)
			}
		}
		// A digest read from an fd that went through net.FileListener is the same.
		f, err := a.File()
		if err != nil {
			t.Fatal(err)
		}
		fl, err := net.FileListener(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer fl.Close()
		d, err := reuseport.ReadDigest(fl.(*net.TCPListener))
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Digest().Compare(d); err != nil {
			t.Fatalf("digest through FileListener differs: %v", err)
		}
	})
}

func TestProtocol(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		for _, tc := range []struct {
			mptcp bool
			want  string
		}{{false, "6"}, {true, "262"}} {
			l := listen(t, &reuseport.Config{MPTCP: tc.mptcp}, "127.0.0.1:0")
			if got := value(l.Digest(), "SO_PROTOCOL"); got != tc.want {
				t.Errorf("MPTCP=%v: SO_PROTOCOL %s, want %s", tc.mptcp, got, tc.want)
			}
			if got := value(l.Digest(), "SO_REUSEPORT"); got != "1" {
				t.Errorf("SO_REUSEPORT = %s", got)
			}
		}
	})
}

func value(d reuseport.Digest, name string) string {
	for _, v := range d.Values {
		if v.Name == name {
			return v.Value
		}
	}
	return "(absent)"
}

func TestEffectiveOptions(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		cpu := 0
		l := listen(t, &reuseport.Config{Options: reuseport.Options{Backlog: 100000, RecvBuffer: 65536,
			IncomingCPU: &cpu, FastOpen: 16, Mark: 7, Congestion: "reno", UserTimeout: 1500e6}}, "127.0.0.1:0")
		eff := l.Effective()
		if eff.Backlog != 4096 || eff.RecvBuffer != 131072 || eff.IncomingCPU == nil || *eff.IncomingCPU != 0 ||
			eff.FastOpen != 16 || eff.Mark != 7 || eff.Congestion != "reno" || eff.UserTimeout != 1500e6 {
			t.Fatalf("effective %+v", eff)
		}
		adj := map[string]reuseport.Adjustment{}
		for _, a := range l.Adjustments() {
			adj[a.Option] = a
		}
		if a := adj["backlog"]; a.Got != "4096" || !strings.Contains(a.Why, "somaxconn") {
			t.Errorf("backlog adjustment %+v", a)
		}
		if a := adj["SO_RCVBUF"]; a.Got != "131072" || !strings.Contains(a.Why, "doubles") {
			t.Errorf("SO_RCVBUF adjustment %+v", a)
		}
		if len(adj) != 2 {
			t.Errorf("adjustments %+v, want backlog and SO_RCVBUF only", l.Adjustments())
		}
	})
}

func TestMigrationPolicy(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		_, err := (&reuseport.Config{Migration: reuseport.MigrationRequire}).Listen(ctx, "tcp4", "127.0.0.1:0")
		if !errors.Is(err, reuseport.ErrMigrationDisabled) || !strings.Contains(err.Error(), "sysctl -w net.ipv4.tcp_migrate_req=1") {
			t.Fatalf("Require on 0: %v", err)
		}
		core, logs := observer.New(zapcore.WarnLevel)
		warn := reuseport.Config{Logger: zap.New(core)}
		listen(t, &warn, "127.0.0.1:0")
		if n := logs.FilterMessageSnippet("tcp_migrate_req").Len(); n != 1 || logs.Len() != 1 {
			t.Fatalf("Warn logged %d (%d in all), want once: %v", n, logs.Len(), logs.All())
		}
		listen(t, &reuseport.Config{Migration: reuseport.MigrationEnable}, "127.0.0.1:0")
		if v, _ := linux.ReadSysctl(linux.MigrateReq); v != "1" {
			t.Fatalf("Enable left the sysctl at %s", v)
		}
		listen(t, &reuseport.Config{Migration: reuseport.MigrationRequire}, "127.0.0.1:0")
		listen(t, &warn, "127.0.0.1:0")
		if logs.Len() != 1 {
			t.Fatalf("Warn logged with the sysctl on: %v", logs.All())
		}
	})
}

func TestBadInput(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		fds := netnstest.FDCount(t)
		for _, tc := range []struct {
			cfg           reuseport.Config
			network, addr string
			check         func(error) bool
		}{
			{network: "sctp", addr: "127.0.0.1:0", check: func(err error) bool { var u net.UnknownNetworkError; return errors.As(err, &u) }},
			{network: "udp", addr: "127.0.0.1:0", check: func(err error) bool { var u net.UnknownNetworkError; return errors.As(err, &u) }},
			{network: "tcp", addr: "127.0.0.1", check: func(err error) bool { var a *net.AddrError; return errors.As(err, &a) }},
			{network: "tcp", addr: "127.0.0.1:65536", check: func(err error) bool { var a *net.AddrError; return errors.As(err, &a) && a.Err == "port out of range" }},
			{network: "tcp4", addr: "[::1]:0", check: func(err error) bool { var a *net.AddrError; return errors.As(err, &a) }},
			{cfg: reuseport.Config{Options: reuseport.Options{Backlog: -1}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "backlog" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Migration: reuseport.MigrationPolicy(99)}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "migration" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{DeferAccept: -time.Second}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_DEFER_ACCEPT" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{UserTimeout: -time.Millisecond}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_USER_TIMEOUT" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{KeepAlive: reuseport.KeepAlive{Enable: true, Idle: -time.Second}}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_KEEPIDLE" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{KeepAlive: reuseport.KeepAlive{Enable: true, Interval: -time.Second}}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_KEEPINTVL" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{KeepAlive: reuseport.KeepAlive{Enable: true, Count: -1}}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_KEEPCNT" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{RecvBuffer: -1}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "SO_RCVBUF" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{SendBuffer: -1}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "SO_SNDBUF" && errors.Is(err, os.ErrInvalid)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{Congestion: "no-such-cc"}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && o.Option == "TCP_CONGESTION" && errors.Is(err, syscall.ENOENT)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{BindToDevice: "nosuchdev0"}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && errors.Is(err, syscall.ENODEV)
				}},
			{cfg: reuseport.Config{Options: reuseport.Options{FastOpen: -5}}, network: "tcp", addr: "127.0.0.1:0",
				check: func(err error) bool {
					var o *reuseport.OptionError
					return errors.As(err, &o) && errors.Is(err, syscall.EINVAL)
				}},
		} {
			l, err := tc.cfg.Listen(ctx, tc.network, tc.addr)
			if err == nil {
				l.Close()
				t.Errorf("Listen(%s, %s, %+v) succeeded", tc.network, tc.addr, tc.cfg.Options)
				continue
			}
			var oe *net.OpError
			if !tc.check(err) || !errors.As(err, &oe) || oe.Op != "listen" {
				t.Errorf("Listen(%s, %s): %v (%#v), wrong error shape", tc.network, tc.addr, err, err)
			}
			t.Logf("%s %s: %v", tc.network, tc.addr, err)
		}
		if n := netnstest.FDCount(t); n != fds {
			t.Fatalf("fds %d before, %d after", fds, n)
		}
	})
}

func TestPacketConnAndControl(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		a, err := reuseport.ListenPacket(ctx, "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := reuseport.ListenPacket(ctx, "udp4", a.LocalAddr().String())
		if err != nil {
			t.Fatalf("second UDP member: %v", err)
		}
		defer b.Close()
		if err := a.Digest().Compare(b.Digest()); err != nil {
			t.Fatal(err)
		}
		// Control in a caller's ListenConfig: it refuses Go's default MPTCP
		// socket, and package net falls back to plain TCP; MPTCP only on request.
		cfg := reuseport.Config{}
		lc := net.ListenConfig{Control: cfg.Control}
		l, err := lc.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		d, _ := reuseport.ReadDigest(l.(*net.TCPListener))
		if p := value(d, "SO_PROTOCOL"); p != "6" {
			t.Fatalf("ListenConfig with Control: SO_PROTOCOL %s, want 6", p)
		}
		mp := net.ListenConfig{Control: (&reuseport.Config{MPTCP: true}).Control}
		ml, err := mp.Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		md, _ := reuseport.ReadDigest(ml.(*net.TCPListener))
		ml.Close()
		if p := value(md, "SO_PROTOCOL"); p != "262" {
			t.Fatalf("Control with MPTCP: SO_PROTOCOL %s, want 262", p)
		}
		ours := listen(t, &cfg, l.Addr().String()) // joins: same options, same uid
		if err := ours.Digest().Without("backlog").Compare(d.Without("backlog")); err != nil {
			t.Fatalf("Control-made and Listen-made sockets differ: %v", err)
		}
		if v, _ := unix.GetsockoptInt(fdOf(t, l.(*net.TCPListener)), unix.SOL_SOCKET, unix.SO_REUSEPORT); v != 1 {
			t.Fatal("Control did not set SO_REUSEPORT")
		}
	})
}

func fdOf(t *testing.T, c syscall.Conn) int {
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return fd
}

// TestCancelledContext: Listen and ListenPacket with a context already ended
// create nothing and return its error.
func TestCancelledContext(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		fds := netnstest.FDCount(t)
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		l, err := reuseport.Listen(cctx, "tcp4", "127.0.0.1:0")
		var oe *net.OpError
		if l != nil || !errors.Is(err, context.Canceled) || !errors.As(err, &oe) || oe.Op != "listen" {
			if l != nil {
				l.Close()
			}
			t.Errorf("Listen with a cancelled ctx: %v, want *net.OpError wrapping context.Canceled", err)
		}
		p, err := reuseport.ListenPacket(cctx, "udp4", "127.0.0.1:0")
		if p != nil || !errors.Is(err, context.Canceled) {
			if p != nil {
				p.Close()
			}
			t.Errorf("ListenPacket with a cancelled ctx: %v, want context.Canceled", err)
		}
		if n := netnstest.FDCount(t); n != fds {
			t.Fatalf("fds %d before, %d after", fds, n)
		}
	})
}

// TestControlBadInput: Control, in a caller's own net.ListenConfig, refuses
// what Listen refuses (a negative duration or count, an unknown
// MigrationPolicy) with the same *OptionError wrapping os.ErrInvalid, and no
// socket is left behind.
func TestControlBadInput(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		fds := netnstest.FDCount(t)
		for _, c := range []struct {
			cfg    reuseport.Config
			option string
		}{
			{reuseport.Config{Options: reuseport.Options{DeferAccept: -time.Second}}, "TCP_DEFER_ACCEPT"},
			{reuseport.Config{Options: reuseport.Options{KeepAlive: reuseport.KeepAlive{Enable: true, Idle: -time.Second}}}, "TCP_KEEPIDLE"},
			{reuseport.Config{Options: reuseport.Options{RecvBuffer: -1}}, "SO_RCVBUF"},
			{reuseport.Config{Migration: reuseport.MigrationPolicy(99)}, "migration"},
		} {
			for _, network := range []string{"tcp4", "udp4"} {
				lc := net.ListenConfig{Control: c.cfg.Control}
				var l io.Closer
				var err error
				if network == "tcp4" {
					l, err = lc.Listen(context.Background(), network, "127.0.0.1:0")
				} else {
					l, err = lc.ListenPacket(context.Background(), network, "127.0.0.1:0")
				}
				var o *reuseport.OptionError
				if err == nil || !errors.As(err, &o) || o.Option != c.option || !errors.Is(err, os.ErrInvalid) {
					if err == nil {
						l.Close()
					}
					t.Errorf("%s with Control and %s: %v; want an *OptionError for %s wrapping os.ErrInvalid", network, c.option, err, c.option)
				}
			}
		}
		if n := netnstest.FDCount(t); n != fds {
			t.Fatalf("fds %d before, %d after", fds, n)
		}
	})
}

// TestInspectCancelled: Inspect with a ctx that has ended returns no group
// and an error naming the address and wrapping ctx.Err().
func TestInspectCancelled(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		l := listen(t, &reuseport.Config{}, "127.0.0.1:0")
		addr := l.Addr().String()
		cctx, cancel := context.WithCancel(context.Background())
		cancel()
		g, err := reuseport.Inspect(cctx, addr)
		if g != nil || !errors.Is(err, context.Canceled) || !strings.HasPrefix(fmt.Sprint(err), "inspect tcp "+addr+": ") {
			t.Errorf("Inspect with a cancelled ctx: %+v, %v; want nil and \"inspect tcp %s: context canceled\"", g, err, addr)
		}
	})
}
