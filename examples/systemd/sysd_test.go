package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
	"github.com/zerodrop/zerodrop/internal/sysdbox"
)

// The tests in sysd*_test.go run the example's units under the real systemd
// (package sysdbox: PID 1 of its own namespaces). Their clients run in this
// process, on threads that joined the box's network namespace
// (sysdbox.DialContext): each request opens a new connection from inside the
// box, and the test counts every outcome itself, with no client process to
// start and end.

const (
	service  = "zerodrop-example.service"
	socket   = "zerodrop-example.socket"
	boxPort  = 8080 // ListenStream= and -addr of the units
	boxURL   = "http://127.0.0.1:8080/"
	boxLimit = 4 * time.Minute // bound on every command a test runs in the box
)

// unitBox is a booted box with the example's binaries and units installed.
type unitBox struct {
	*sysdbox.Box
	t   *testing.T
	ctx context.Context
}

// bootExample boots a box, copies the example and cmd/zerodrop to the paths
// the units name, and installs the service (without its Requires=/After= of
// the socket unless withSocket: then the fd store alone keeps the socket),
// the socket unit if withSocket, and the given drop-ins ("name.d/x.conf").
func bootExample(t *testing.T, withSocket bool, dropins map[string]string) *unitBox {
	t.Helper()
	b := sysdbox.Boot(t)
	ctx, cancel := context.WithTimeout(context.Background(), boxLimit)
	t.Cleanup(cancel)
	u := &unitBox{Box: b, t: t, ctx: ctx}
	t.Cleanup(func() { // before the box closes
		if t.Failed() {
			j, _ := b.Exec(ctx, "journalctl", "--no-pager", "-q", "-o", "short-monotonic", "-u", service, "-u", socket)
			t.Logf("journal of the units:\n%s", j)
		}
	})
	for bin, pkg := range map[string]string{"zerodrop-example": ".", "zerodrop": "../../cmd/zerodrop"} {
		if err := b.CopyIn(build(t, pkg, bin), "/usr/local/bin/"+bin); err != nil {
			t.Fatal(err)
		}
	}
	units := map[string]string{service: u.unitFile(service)}
	if withSocket {
		units[socket] = u.unitFile(socket)
	} else {
		var kept []string
		for _, l := range strings.Split(units[service], "\n") {
			if !strings.HasPrefix(l, "Requires="+socket) && !strings.HasPrefix(l, "After="+socket) {
				kept = append(kept, l)
			}
		}
		units[service] = strings.Join(kept, "\n")
	}
	for name, content := range dropins {
		units[name] = content
	}
	for name, content := range units {
		if err := b.Install(ctx, name, content); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

func (u *unitBox) unitFile(name string) string {
	b, err := os.ReadFile(name)
	if err != nil {
		u.t.Fatal(err)
	}
	return string(b)
}

// systemctl runs systemctl in the box and fails the test on error.
func (u *unitBox) systemctl(args ...string) string {
	u.t.Helper()
	out, err := u.Systemctl(u.ctx, args...)
	if err != nil {
		u.t.Fatal(err)
	}
	return out
}

// show returns a property of the service.
func (u *unitBox) show(prop string) string {
	u.t.Helper()
	v, err := u.Show(u.ctx, service, prop)
	if err != nil {
		u.t.Fatal(err)
	}
	return v
}

// mainPID is the service's MainPID (0 when none), as the box numbers it.
func (u *unitBox) mainPID() int {
	u.t.Helper()
	pid, err := strconv.Atoi(u.show("MainPID"))
	if err != nil {
		u.t.Fatal(err)
	}
	return pid
}

// listener is the one listening socket on boxPort in the box.
func (u *unitBox) listener() sockdiag.Listener {
	u.t.Helper()
	var ls []sockdiag.Listener
	var err error
	if nerr := u.InNet(func() { ls, err = sockdiag.Listeners(boxPort) }); nerr != nil {
		err = nerr
	}
	if err != nil || len(ls) != 1 {
		u.t.Fatalf("listeners on %d in the box: %+v (%v), want one", boxPort, ls, err)
	}
	return ls[0]
}

// listeners counts the listening sockets on boxPort in the box.
func (u *unitBox) listeners() int {
	u.t.Helper()
	var ls []sockdiag.Listener
	var err error
	if nerr := u.InNet(func() { ls, err = sockdiag.Listeners(boxPort) }); nerr != nil {
		err = nerr
	}
	if err != nil {
		u.t.Fatal(err)
	}
	return len(ls)
}

// counters reads the box's TcpExt and Tcp counters.
func (u *unitBox) counters() linux.SNMP {
	u.t.Helper()
	var s linux.SNMP
	var err error
	if nerr := u.InNet(func() { s, err = linux.ReadSNMP() }); nerr != nil {
		err = nerr
	}
	if err != nil {
		u.t.Fatal(err)
	}
	return s
}

// lossCounters are the counters that show a connection lost in the box's
// network namespace: a reset sent, or a SYN dropped at a full queue.
var lossCounters = []string{"Tcp.OutRsts", "Tcp.EstabResets", "TcpExt.ListenDrops", "TcpExt.ListenOverflows"}

// noLoss fails the test unless every loss counter is where it was in before.
func (u *unitBox) noLoss(before linux.SNMP) {
	u.t.Helper()
	after := u.counters()
	for _, k := range lossCounters {
		if d := int64(after[k]) - int64(before[k]); d != 0 {
			u.t.Errorf("%s +%d in the box, want 0", k, d)
		}
	}
}

// client is an HTTP client whose connections are dialled in the box.
func (u *unitBox) client() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: u.DialContext}}
}

// get GETs / in the box and returns the body's line.
func (u *unitBox) get() string {
	u.t.Helper()
	c := u.client()
	defer c.CloseIdleConnections()
	resp, err := c.Get(boxURL)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		u.t.Fatalf("GET %s in the box: %d %q %v", boxURL, resp.StatusCode, b, err)
	}
	return strings.TrimSpace(string(b))
}

// waitJournal waits (at most 30 s) until the service's journal has a line
// containing s, and returns the journal.
func (u *unitBox) waitJournal(s string) string {
	u.t.Helper()
	j, err := u.WaitJournal(u.ctx, service, s, 30*time.Second)
	if err != nil {
		u.t.Fatalf("%v:\n%s", err, j)
	}
	return j
}

// waitFor polls cond every 50 ms for at most 60 s and fails with what.
func (u *unitBox) waitFor(what string, cond func() bool) {
	u.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			u.t.Fatalf("not within 60 s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// body is the example's answer to GET /.
func body(gen, pid int, ino uint64) string {
	return fmt.Sprintf("generation %d pid %d inode %d", gen, pid, ino)
}

// countLines counts the journal lines that contain s.
func countLines(journal, s string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(journal))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			n++
		}
	}
	return n
}
