package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("listen", helperListen)
	netnstest.RegisterHelper("doctor", helperDoctor)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// helperListen listens on 127.0.0.1:0 with the backlog in $BACKLOG, prints
// the port, and holds the listener, never accepting, until it is killed.
func helperListen() {
	backlog, _ := strconv.Atoi(os.Getenv("BACKLOG"))
	cfg := reuseport.Config{Options: reuseport.Options{Backlog: backlog}}
	l, err := cfg.Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%d\n", l.Addr().(*net.TCPAddr).Port)
	select {}
}

// helperDoctor runs zerodrop with the space-separated arguments in
// $DOCTOR_ARGS and exits with its status.
func helperDoctor() {
	os.Exit(run(context.Background(), strings.Fields(os.Getenv("DOCTOR_ARGS")), os.Stdout, os.Stderr))
}

// doctorJSON runs doctor --json with extra flags against k and returns the
// decoded report and the exit status.
func doctorJSON(t *testing.T, k kernel, args ...string) (report, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := doctorMain(context.Background(), append([]string{"--json"}, args...), &out, &errOut, k)
	if errOut.Len() > 0 {
		t.Logf("doctor stderr: %s", errOut.String())
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("doctor --json output %q: %v", out.String(), err)
	}
	return r, code
}

// listen makes a reuseport listener on address with the given backlog (0:
// somaxconn), closed when the test ends.
func listen(t *testing.T, address string, backlog int) *reuseport.Listener {
	t.Helper()
	cfg := reuseport.Config{Options: reuseport.Options{Backlog: backlog}, Migration: reuseport.MigrationIgnore}
	l, err := cfg.Listen(context.Background(), "tcp4", address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func port(l *reuseport.Listener) int { return l.Addr().(*net.TCPAddr).Port }

// inode returns the socket inode of c.
func inode(t *testing.T, c syscall.Conn) uint64 {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return st.Ino
}

// eventually polls cond every 10 ms for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queueLen reads l's accept queue (TCP_INFO).
func queueLen(t *testing.T, l *reuseport.Listener) uint32 {
	t.Helper()
	q, err := l.Queue()
	if err != nil {
		t.Fatal(err)
	}
	return q.Len
}

// find returns the member with inode ino and its group.
func find(r report, ino uint64) (group, member, bool) {
	for _, g := range r.Groups {
		for _, m := range g.Members {
			if m.Inode == ino {
				return g, m, true
			}
		}
	}
	return group{}, member{}, false
}

// codes lists the problem codes of r, in order.
func codes(r report) []string {
	out := []string{}
	for _, p := range r.Problems {
		out = append(out, p.Code)
	}
	return out
}
