package zerodrop_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
)

// activatedMain is generationMain started as systemd starts a
// socket-activated service: LISTEN_FDS and LISTEN_FDNAMES are in the
// environment, the socket is fd 3, and LISTEN_PID, which systemd sets between
// fork and exec, is set here first. Serve's Activated unsets them, so a
// successor started by SIGHUP runs generationMain without them.
func activatedMain() {
	if os.Getenv("LISTEN_FDS") != "" {
		os.Setenv("LISTEN_PID", strconv.Itoa(os.Getpid()))
	}
	generationMain()
}

// TestServeSystemdTLS: a service built on Serve with a TLSConfig, started
// as systemd starts a socket-activated unit (the test holds the listening
// socket, as systemd does, and passes it as fd 3 with LISTEN_FDS), is
// handed over once through handoff (SIGHUP) and then restarted as systemd
// restarts it (SIGTERM, exit, a new process given the same fd), under HTTPS
// load: Go's Transport with a new TLS connection per request and with HTTP/2
// on kept-alive connections, curl --http1.1 and curl --http2. Not one request
// fails. The TLS trap: 20 clients connected to the generation being restarted
// (accepted by it) do their handshake and request 20 ms after its SIGTERM:
// 20/20 answered, by it, and its drain counts them as pending at the stop.
func TestServeSystemdTLS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		const addr, trapped = "127.0.0.1:8080", 20
		url := "https://" + addr + "/"
		cert := netnstest.NewCert(t)
		// systemd's socket (ListenStream=), open for the whole test.
		ln, err := (&reuseport.Config{}).Listen(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		fd3, err := ln.File()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fd3.Close() })
		bin := netnstest.ExecutableCopy(t)
		env := []string{"ZERODROP_TEST_HELPER=activated", "ZD_ADDR=" + addr, "ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"),
			"ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile, "LISTEN_FDS=1", "LISTEN_FDNAMES=https"}
		// activate starts the service as systemd does.
		activate := func() (*netnstest.Subreaped, int) {
			s := netnstest.StartSubreapedFiles(t, bin, []*os.File{fd3}, env, "-test.run=^$")
			return s, servingPID(t, s.Expect(t, "serving 1 "))
		}
		s, pid1 := activate()
		counters := netnstest.Snapshot(t)

		h1 := &http.Transport{TLSClientConfig: cert.Client(), DisableKeepAlives: true, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
		h2 := &http.Transport{TLSClientConfig: cert.Client(), ForceAttemptHTTP2: true}
		t.Cleanup(h2.CloseIdleConnections)
		l1, l2 := startLoad(t, url, h1), startLoad(t, url, h2)
		c1, c2 := startCurl(t, &tlsSetup{cert, h1}, url, l1), startCurl(t, &tlsSetup{cert, h2}, url, l2)
		waitBoth := func(pid int) { l1.waitFor(t, pid, 50); l2.waitFor(t, pid, 50) }
		waitBoth(pid1)

		// The handoff: generation 2 inherits systemd's socket from generation 1.
		if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		pid2 := servingPID(t, s.Expect(t, "serving 2 "))
		checkReport(t, s.Expect(t, "report 1 "), "successor_ready", drain.MethodRelease)
		if ws := s.Reap(t, pid1, 30*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation 1 exited with %v", ws)
		}
		waitBoth(pid2)

		// The restart, with the TLS trap set for generation 2.
		conns := make([]net.Conn, trapped)
		for i := range conns {
			if conns[i], err = net.DialTimeout("tcp", addr, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			defer conns[i].Close()
		}
		netnstest.WaitQueue(t, ln, 0) // generation 2 accepted them
		fds, ino := fmt.Sprintf("/proc/%d/fd", pid2), netnstest.SocketInode(t, ln)
		held := netnstest.SocketFDs(fds, ino) // its listener's, and its Upgrader's for a successor
		if err := syscall.Kill(pid2, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		netnstest.WaitFewerFDs(t, fds, ino, held) // the drain closed the listener: it stopped
		time.Sleep(20 * time.Millisecond)         // the clients are late, on purpose
		// All at once, each 20 ms late: one after the other, under load, the
		// last ones came seconds after the stop, past the drain's NewConnGrace.
		byPID := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body, err := netnstest.LateGet(c, cert.Client("http/1.1"))
				if err == nil {
					var pid int
					if pid, err = strconv.Atoi(strings.TrimSpace(body)); err == nil {
						mu.Lock()
						byPID[pid]++
						mu.Unlock()
						return
					}
				}
				t.Errorf("trapped client %d: %v", i, err)
			}()
		}
		wg.Wait()
		rep2 := checkReport(t, s.Expect(t, "report 2 "), "terminated", drain.MethodRelease)
		if ws := s.Reap(t, pid2, 30*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation 2 exited with %v", ws)
		}
		t.Logf("the TLS trap: %d clients answered by pid %v; generation 2's drain: %s TLS connections pending at the stop, %s served",
			trapped, byPID, rep2[7], rep2[8])
		if served, _ := strconv.Atoi(rep2[8]); byPID[pid2] != trapped || served < trapped {
			t.Errorf("the trapped clients were answered by %v and the drain served %d TLS connections pending at the stop; want %d by generation 2's pid %d",
				byPID, served, trapped, pid2)
		}
		s3, pid3 := activate()
		waitBoth(pid3)
		failed1, answered1, err1 := l1.stop()
		failed2, answered2, err2 := l2.stop()
		c1.check(t)
		c2.check(t)
		rep3 := s3.StopLast(t, []int{pid3}, "report 1 ")
		checkReport(t, rep3, "terminated", drain.MethodRelease)
		t.Logf("Go HTTPS, a new connection per request: answered %v, failed %d, protocols %v", answered1, failed1, l1.proto)
		t.Logf("Go HTTP/2, kept alive: answered %v, failed %d, protocols %v", answered2, failed2, l2.proto)
		if failed1+failed2 != 0 {
			t.Errorf("failed requests: %d (first %v), %d (first %v); want none", failed1, err1, failed2, err2)
		}
		if len(l1.proto) != 1 || l1.proto["HTTP/1.1"] == 0 || len(l2.proto) != 1 || l2.proto["HTTP/2.0"] == 0 {
			t.Errorf("protocols %v and %v, want HTTP/1.1 only and HTTP/2.0 only", l1.proto, l2.proto)
		}
		counters.CheckConnects(t)
	})
}

// checkReport checks a generationMain "report" line: its cause and drain
// method, and nothing lost.
func checkReport(t *testing.T, line, cause string, method drain.Method) []string {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 9 || f[2] != cause || f[3] != string(method) || f[4] != "0" {
		t.Errorf("report %q, want cause %s, method %s, 0 lost", line, cause, method)
	}
	return f
}
