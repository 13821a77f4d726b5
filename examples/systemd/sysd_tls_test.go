package main

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// Where TestSystemdTLS puts the certificate in the box, and the URL it serves.
const (
	boxCert     = "/etc/zerodrop-example/cert.pem"
	boxKey      = "/etc/zerodrop-example/key.pem"
	boxHTTPSURL = "https://127.0.0.1:8080/"
)

// TestSystemdTLS: the shipped units under the real systemd, the service
// serving HTTPS (-cert and -key, a drop-in) on the socket systemd bound. A
// "systemctl restart" (SIGTERM, exit, a new process given the socket unit's
// fd), then three "systemctl reload" (handoffs), run under load: Go's
// Transport with a new TLS connection per request and with HTTP/2 on
// kept-alive connections, and curl --http1.1 and curl --http2 run in the box.
// Not one request fails, and curl negotiated what it asked for. The TLS trap
// at the restart: 20 clients accepted by the old process do their handshake
// and request, all at once, 20 ms after its listener stopped: 20/20
// answered, by it.
//
// (The restart came first here while a stop after a reload SIGKILLed the
// successor; TestSystemdReloadThenRestart covers that order.)
func TestSystemdTLS(t *testing.T) {
	netnstest.CheckLeaks(t)
	cert := netnstest.NewCert(t)
	execStart := ""
	unit, err := os.ReadFile(service)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(unit), "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			execStart = l
		}
	}
	if execStart == "" {
		t.Fatalf("%s has no ExecStart=", service)
	}
	u := bootExample(t, true, map[string]string{
		service + ".d/tls.conf": fmt.Sprintf("[Service]\nExecStart=\n%s -cert %s -key %s\n", execStart, boxCert, boxKey),
	})
	for src, dst := range map[string]string{cert.CertFile: boxCert, cert.KeyFile: boxKey} {
		if err := u.CopyIn(src, dst); err != nil {
			t.Fatal(err)
		}
	}
	u.systemctl("start", socket, service)
	l := u.listener()
	before := u.counters()

	h1 := &http.Transport{DisableKeepAlives: true, DialContext: u.DialContext, TLSClientConfig: cert.Client(),
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	h2 := &http.Transport{DialContext: u.DialContext, TLSClientConfig: cert.Client(), ForceAttemptHTTP2: true}
	loads := map[string]*load{
		"Go HTTPS, a new connection per request": startLoadFunc(t, 4, u.pidOf(h1, "HTTP/1.1")),
		"Go HTTP/2, kept alive":                  startLoadFunc(t, 4, u.pidOf(h2, "HTTP/2.0")),
		"curl --http1.1":                         startLoadFunc(t, 1, u.curl("--http1.1", "1.1")),
		"curl --http2":                           startLoadFunc(t, 1, u.curl("--http2", "2")),
	}
	waitAll := func(pid int) {
		for what, ld := range loads {
			n := 20
			if strings.HasPrefix(what, "curl") {
				n = 3
			}
			ld.waitFor(t, strconv.Itoa(pid), n)
		}
	}
	waitAll(u.mainPID())
	// The restart, with the TLS trap set for the old process.
	old := u.mainPID()
	conns := make([]net.Conn, 20)
	for i := range conns {
		var err error
		if conns[i], err = u.DialContext(u.ctx, "tcp", "127.0.0.1:8080"); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	u.waitFor("the old process accepted the 20 trapped connections", func() bool { return u.listener().Queue == 0 })
	fds := u.Path(fmt.Sprintf("/proc/%d/fd", old))
	held := netnstest.SocketFDs(fds, l.Inode)
	restarted := make(chan error, 1)
	go func() { _, err := u.Systemctl(u.ctx, "restart", service); restarted <- err }()
	netnstest.WaitFewerFDs(t, fds, l.Inode, held) // the drain closed its listener: it stopped
	time.Sleep(20 * time.Millisecond)             // the clients are late, on purpose
	// All at once: one after the other, the last handshakes came more
	// than NewConnGrace (1 s) after the stop beside a CPU hog (load 16),
	// and were closed as silent connections, rightly.
	byPID := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := netnstest.LateGet(c, cert.Client("http/1.1"))
			mu.Lock()
			defer mu.Unlock()
			if f := strings.Fields(body); err == nil && len(f) == 6 {
				byPID[f[3]]++
			} else {
				t.Errorf("trapped client %d: %q %v", i, body, err)
			}
		}()
	}
	wg.Wait()
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	t.Logf("the TLS trap: 20 clients answered by pid %v (the old process: %d)", byPID, old)
	if byPID[strconv.Itoa(old)] != len(conns) {
		t.Errorf("the trapped clients were answered by %v, want all by the old process %d", byPID, old)
	}
	pid := u.mainPID()
	if pid == old || pid == 0 {
		t.Fatalf("MainPID %d after systemctl restart, was %d", pid, old)
	}
	waitAll(pid)

	// The handoffs, after the restart.
	const reloads = 3
	for range reloads {
		old := u.mainPID()
		u.systemctl("reload", service)
		pid := u.mainPID()
		if pid == old || pid == 0 {
			t.Fatalf("MainPID %d when systemctl reload returned, was %d", pid, old)
		}
		waitAll(pid)
	}

	for what, ld := range loads {
		byPID, failed := ld.stop()
		t.Logf("%s: answered by pid %v, failed %d", what, byPID, len(failed))
		if len(failed) != 0 {
			t.Errorf("%s: failed %v, want none", what, failed)
		}
	}
	if got := u.listener(); got.Inode != l.Inode {
		t.Errorf("listening inode %d at the end, want %d throughout", got.Inode, l.Inode)
	}
	// Over TLS a close resets (close_notify meeting a closed socket), so
	// only drops count here; the clients count every failure.
	after := u.counters()
	for _, k := range []string{"TcpExt.ListenDrops", "TcpExt.ListenOverflows"} {
		if d := int64(after[k]) - int64(before[k]); d != 0 {
			t.Errorf("%s +%d in the box, want 0", k, d)
		}
	}
	t.Logf("Tcp.OutRsts +%d in the box", int64(after["Tcp.OutRsts"])-int64(before["Tcp.OutRsts"]))
}

// pidOf is a load function: one GET of boxHTTPSURL with tr, which must
// come back over proto; it returns the pid that answered.
func (u *unitBox) pidOf(tr *http.Transport, proto string) func() (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	u.t.Cleanup(tr.CloseIdleConnections)
	return func() (string, error) {
		f, got, err := answer(c, boxHTTPSURL)
		switch {
		case err != nil:
			return "", err
		case got != proto:
			return "", fmt.Errorf("%s, want %s", got, proto)
		}
		return f[3], nil
	}
}

// curl is a load function: curl with the version flag given, run in the
// box, trusting only boxCert, which must have negotiated version
// (%{http_version}); it returns the pid that answered.
func (u *unitBox) curl(flag, version string) func() (string, error) {
	return func() (string, error) {
		out, err := u.Exec(u.ctx, "curl", "-sS", "--fail", "--max-time", "10", flag, "--cacert", boxCert,
			"-w", "%{http_version}", boxHTTPSURL)
		if err != nil {
			return "", err
		}
		f := strings.Fields(string(out))
		if len(f) != 7 || f[0] != "generation" || f[6] != version {
			return "", fmt.Errorf("curl %s: %q, want an answer and HTTP version %s", flag, out, version)
		}
		return f[3], nil
	}
}
