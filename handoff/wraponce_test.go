package handoff

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// checkOnce fails unless err is one *net.OpError for op on the unix path,
// whose cause is no *net.OpError, matching target.
func checkOnce(t *testing.T, what string, err error, op, path string, target error) {
	t.Helper()
	var oe *net.OpError
	switch {
	case !errors.As(err, &oe) || error(oe) != err:
		t.Errorf("%s: %#v, want a *net.OpError", what, err)
	case oe.Op != op || oe.Net != "unix" || oe.Addr == nil || oe.Addr.String() != path:
		t.Errorf("%s: %q, want op %s on unix %s", what, err, op, path)
	case errors.As(oe.Err, new(*net.OpError)):
		t.Errorf("%s: %q, want it wrapped once: its cause is a second *net.OpError", what, err)
	case !errors.Is(err, target):
		t.Errorf("%s: %q does not match %q", what, err, target)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// TestPathErrorsWrappedOnce: a handoff path whose lstat fails (here: under a
// regular file, ENOTDIR) is refused by New, ListenConns and DialConns with
// one *net.OpError of their op naming the path, and a path whose directory
// cannot be checked with one of op "check". It used to be
// "handoff unix P: check unix P: lstat: not a directory".
func TestPathErrorsWrappedOnce(t *testing.T) {
	netnstest.CheckLeaks(t)
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(file, "handoff.sock")
	handlers := map[string]func(PassedConn){"http": func(pc PassedConn) { pc.Conn.Close() }}
	cfg := ConnsConfig{Addrs: map[string]net.Addr{"http": &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}}}

	u, err := New(ctx, Config{Path: under})
	if u != nil {
		u.Close()
	}
	checkOnce(t, "New", err, "handoff", under, syscall.ENOTDIR)
	l, err := ListenConns(under, cfg, handlers)
	if l != nil {
		l.Close()
	}
	checkOnce(t, "ListenConns", err, "listen conns", under, syscall.ENOTDIR)
	s, err := DialConns(ctx, under, cfg)
	if s != nil {
		s.Close()
	}
	checkOnce(t, "DialConns", err, "dial conns", under, syscall.ENOTDIR)

	// A directory that does not exist: checkDir's stat fails.
	gone := filepath.Join(dir, "gone", "handoff.sock")
	u, err = New(ctx, Config{Path: gone})
	if u != nil {
		u.Close()
	}
	checkOnce(t, "New in a missing directory", err, "check", gone, syscall.ENOENT)
	s, err = DialConns(ctx, gone, cfg)
	if s != nil {
		s.Close()
	}
	checkOnce(t, "DialConns in a missing directory", err, "check", gone, syscall.ENOENT)
}
