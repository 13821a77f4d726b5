package zerodrop_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sysdbox"
)

// ticketsUnit runs resumeMain (Serve over TLS) as a Type=notify service on
// 127.0.0.1:8443 in the box; %d is FileDescriptorStoreMax=, %s the handoff
// socket (ZD_SOCK; empty for none).
const ticketsUnit = `[Unit]
StartLimitIntervalSec=0
[Service]
Type=notify
NotifyAccess=all
Environment=ZERODROP_TEST_HELPER=resume ZD_ADDR=127.0.0.1:8443 ZD_CERT=/etc/zd-tickets/cert.pem ZD_KEY=/etc/zd-tickets/key.pem
Environment=ZD_SOCK=%s
RuntimeDirectory=zd-tickets
RuntimeDirectoryMode=0700
ExecStart=/usr/local/bin/zd-tickets.test -test.run=^$
FileDescriptorStoreMax=%d
TimeoutStopSec=30
`

// TestServeSystemdRestartResumes: a TLS service built on Serve, run by the
// real systemd (package sysdbox: PID 1 of its own namespaces, its own /tmp)
// without a handoff socket, keeps its session-ticket keys in the fd store
// (a sealed memfd named zerodrop-tickets, never a file): after each
// "systemctl restart" (SIGTERM, exit, a new process) a client holding a
// ticket of the previous process resumes its session (the server's
// DidResume), Go's client and openssl s_client (-sess_out, then -sess_in,
// run in the box), and the store holds that one memfd, replaced, not
// accumulated; the same with a handoff socket (the keys then come through
// the Upgrader's activation). The control, the same unit with
// FileDescriptorStoreMax=0 (what every restart was before: nowhere to keep
// the keys), resumes nothing after a restart.
func TestServeSystemdRestartResumes(t *testing.T) {
	netnstest.CheckLeaks(t)
	b := sysdbox.Boot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const unit = "zd-tickets.service"
	t.Cleanup(func() {
		if t.Failed() {
			j, _ := b.Journal(ctx, unit)
			t.Logf("journal of %s:\n%s", unit, j)
		}
	})
	cert := netnstest.NewCert(t)
	for src, dst := range map[string]string{netnstest.ExecutableCopy(t): "/usr/local/bin/zd-tickets.test",
		cert.CertFile: "/etc/zd-tickets/cert.pem", cert.KeyFile: "/etc/zd-tickets/key.pem"} {
		if err := b.CopyIn(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	systemctl := func(args ...string) string {
		t.Helper()
		out, err := b.Systemctl(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	mainPID := func() int {
		t.Helper()
		pid, err := strconv.Atoi(systemctl("show", "-p", "MainPID", "--value", unit))
		if err != nil || pid == 0 {
			t.Fatalf("MainPID %d: %v", pid, err)
		}
		return pid
	}
	c := sessionClient(t, cert, 0)
	c.Transport.(*http.Transport).DialContext = b.DialContext
	const url = "https://127.0.0.1:8443/"
	// get asks once on a new connection; the answer must come from pid.
	get := func(pid int) bool {
		t.Helper()
		got, resumed := resumedGet(t, c, url)
		if got != pid {
			t.Fatalf("answered by pid %d, want the service's MainPID %d", got, pid)
		}
		return resumed
	}
	// sClient runs openssl s_client in the box (TLS 1.3, one request,
	// "-sess_out" or "-sess_in" the box's /tmp/zd-sess) and returns
	// whether OpenSSL reused the session and the server's X-Resumed.
	sClient := func(sess string) (bool, string) {
		t.Helper()
		out, err := b.Exec(ctx, "sh", "-c", "printf 'GET / HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' | "+
			"openssl s_client -connect 127.0.0.1:8443 -servername localhost -CAfile /etc/zd-tickets/cert.pem "+
			"-verify_return_error -tls1_3 -ign_eof "+sess+" /tmp/zd-sess 2>&1")
		if err != nil {
			t.Fatalf("openssl s_client %s: %v", sess, err)
		}
		reused, resumed := strings.Contains(string(out), "Reused, TLSv1.3"), ""
		if !reused && !strings.Contains(string(out), "New, TLSv1.3") {
			t.Fatalf("openssl s_client %s: neither New nor Reused:\n%s", sess, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "X-Resumed: "); ok {
				resumed = v
			}
		}
		return reused, resumed
	}
	// restart restarts the service and checks it resumes the session
	// (a ticket of the previous process) or not, as want says.
	restart := func(what string, want bool) {
		t.Helper()
		old := mainPID()
		if reused, _ := sClient("-sess_out"); reused {
			t.Fatalf("%s: openssl reused a session it had none of", what)
		}
		systemctl("restart", unit)
		pid := mainPID()
		if pid == old {
			t.Fatalf("%s: MainPID %d unchanged by systemctl restart", what, pid)
		}
		if got := get(pid); got != want {
			t.Errorf("%s: the first connection to the new process (pid %d) resumed a session of pid %d: %v, want %v", what, pid, old, got, want)
		}
		if !get(pid) {
			t.Errorf("%s: the second connection to pid %d did not resume its own session", what, pid)
		}
		if reused, resumed := sClient("-sess_in"); reused != want || resumed != strconv.FormatBool(want) {
			t.Errorf("%s: openssl with a session of pid %d: reused %v, server X-Resumed %q; want %v", what, old, reused, resumed, want)
		}
	}

	for _, c := range []struct {
		name, sock string
		store      int
	}{{"control without an fd store", "", 0}, {"fd store", "", 2}, {"fd store and a handoff socket", "/run/zd-tickets/handoff.sock", 2}} {
		if err := b.Install(ctx, unit, fmt.Sprintf(ticketsUnit, c.sock, c.store)); err != nil {
			t.Fatal(err)
		}
		// A stop empties the store (FileDescriptorStorePreserve=,
		// systemd 254+, could keep it): the first start draws keys.
		systemctl("stop", unit)
		systemctl("start", unit)
		pid := mainPID()
		if get(pid) {
			t.Fatalf("%s: the first connection to pid %d resumed a session", c.name, pid)
		}
		for i := range 2 {
			restart(c.name+" restart "+strconv.Itoa(i+1), c.store > 0)
			want := strconv.Itoa(min(c.store, 1))
			if n := systemctl("show", "-p", "NFileDescriptorStore", "--value", unit); n != want {
				t.Errorf("%s: NFileDescriptorStore %s after restart %d, want %s", c.name, n, i+1, want)
			}
		}
	}
	systemctl("stop", unit)
	if n := systemctl("show", "-p", "NFileDescriptorStore", "--value", unit); n != "0" {
		t.Errorf("NFileDescriptorStore %s after stop, want 0: the keys outlived the service", n)
	}
}
