package zerodrop_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// tlsHandoffService starts generation 1 of resumeMain with
// Options.TLSHandoff in a fresh namespace's process tree, and returns it,
// its pid, the certificate and the address.
func tlsHandoffService(t *testing.T) (*netnstest.Subreaped, int, *netnstest.Cert, string) {
	cert := netnstest.NewCert(t)
	bin := netnstest.ExecutableCopy(t)
	dir := t.TempDir()
	addr := "127.0.0.1:8443"
	env := []string{"ZERODROP_TEST_HELPER=resume", "ZD_SOCK=" + filepath.Join(dir, "handoff.sock"), "ZD_ADDR=" + addr,
		"ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile, "ZD_TLS_HANDOFF=1"}
	s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
	return s, servingPID(t, s.Expect(t, "serving 1 ")), cert, addr
}

// upgrade makes generation pid hand over to the next, and returns the
// next's pid and the predecessor's report line, once it exited.
func upgrade(t *testing.T, s *netnstest.Subreaped, pid, gen int) (int, string) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	next := servingPID(t, s.Expect(t, fmt.Sprintf("serving %d ", gen+1)))
	rep := s.Expect(t, fmt.Sprintf("report %d ", gen))
	if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
		t.Errorf("generation %d exited with %v", gen, ws)
	}
	return next, rep
}

// stop ends generation pid with SIGTERM.
func stop(t *testing.T, s *netnstest.Subreaped, pid, gen int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.Expect(t, fmt.Sprintf("report %d ", gen))
	s.Reap(t, pid, 30*time.Second)
}

// TestServeTLSHandoffGoClient: with Options.TLSHandoff, Go's
// http.Transport keeps its TLS 1.3 keep-alive connection across two
// handoffs between three processes: the requests after each are answered by
// the successor on the same TCP connection (same local port), without a
// new dial or handshake, and each predecessor's report counts it.
func TestServeTLSHandoffGoClient(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s, pid1, cert, addr := tlsHandoffService(t)
		cc := cert.Client()
		cc.MinVersion = tls.VersionTLS13
		tr := &http.Transport{TLSClientConfig: cc, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, IdleConnTimeout: time.Minute}
		defer tr.CloseIdleConnections()
		c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
		var handshakes, conns atomic.Int64
		get := func() (pid int, local string) {
			t.Helper()
			trace := &httptrace.ClientTrace{
				TLSHandshakeStart: func() { handshakes.Add(1) },
				GotConn: func(i httptrace.GotConnInfo) {
					local = i.Conn.LocalAddr().String()
					if !i.Reused {
						conns.Add(1)
					}
				},
			}
			req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "https://"+addr+"/", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("body %q", b)
			}
			return pid, local
		}
		pid, local := get()
		if pid != pid1 {
			t.Fatalf("pid %d, want %d", pid, pid1)
		}
		pid2, rep := upgrade(t, s, pid1, 1)
		if !strings.Contains(rep, " tls_handed=1 ") {
			t.Errorf("generation 1's report: %q, want tls_handed=1", rep)
		}
		for range 3 {
			pid, again := get()
			if pid != pid2 || again != local {
				t.Fatalf("after the handoff: pid %d on %s, want %d on %s", pid, again, pid2, local)
			}
		}
		// Generation 2 hands the session on again.
		pid3, rep := upgrade(t, s, pid2, 2)
		if !strings.Contains(rep, " tls_handed=1 ") {
			t.Errorf("generation 2's report: %q, want tls_handed=1", rep)
		}
		for range 3 {
			pid, again := get()
			if pid != pid3 || again != local {
				t.Fatalf("after the second handoff: pid %d on %s, want %d on %s", pid, again, pid3, local)
			}
		}
		if h, n := handshakes.Load(), conns.Load(); h != 1 || n != 1 {
			t.Fatalf("%d handshakes on %d connections, want 1 and 1", h, n)
		}
		tr.CloseIdleConnections()
		stop(t, s, pid3, 3)
	})
}

// TestServeTLSHandoffOpenSSL: openssl s_client (TLS 1.3) sends a request,
// then a KeyUpdate asking for ours (K), and after the handoff another
// request, a KeyUpdate and a third request: the successor answers both on
// the session (no new handshake: s_client would print a new session).
func TestServeTLSHandoffOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl not installed (.ci/run installs it): %v", err)
	}
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s, pid1, cert, addr := tlsHandoffService(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "openssl", "s_client", "-connect", addr, "-servername", "localhost", "-CAfile", cert.CertFile,
			"-verify_return_error", "-tls1_3", "-crlf", "-msg")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			stdin.Close()
			cmd.Process.Kill()
			cmd.Wait()
		}()
		lines := make(chan string, 4096)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		var handshakes int
		expect := func(want string) {
			t.Helper()
			timeout := time.After(30 * time.Second)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("openssl s_client ended before %q", want)
					}
					if strings.Contains(l, "ClientHello") {
						handshakes++
					}
					if strings.Contains(l, want) {
						return
					}
				case <-timeout:
					t.Fatalf("no %q from openssl s_client", want)
				}
			}
		}
		send := func(s string) { io.WriteString(stdin, s+"\n") }
		request := "GET / HTTP/1.1\nHost: localhost\n"
		send(request)
		expect(strconv.Itoa(pid1))
		send("K")
		expect("KEYUPDATE")
		expect("<<< TLS 1.3, Handshake [length 0005], KeyUpdate") // ours, in answer
		pid2, rep := upgrade(t, s, pid1, 1)
		if !strings.Contains(rep, " tls_handed=1 ") {
			t.Errorf("generation 1's report: %q, want tls_handed=1", rep)
		}
		send(request)
		expect(strconv.Itoa(pid2))
		send("K")
		expect("<<< TLS 1.3, Handshake [length 0005], KeyUpdate")
		send(request)
		expect(strconv.Itoa(pid2))
		if handshakes != 1 {
			t.Fatalf("%d ClientHellos, want 1", handshakes)
		}
		stop(t, s, pid2, 2)
	})
}

// TestServeTLSHandoffCurl: curl (OpenSSL) fetching 60 URLs over one
// HTTP/1.1 TLS 1.3 keep-alive connection, 10 per second, across a handoff:
// every request is answered, by generation 1 then 2, and curl connected
// once.
func TestServeTLSHandoffCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("curl not installed (.ci/run installs it): %v", err)
	}
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		s, pid1, cert, addr := tlsHandoffService(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const n = 60
		cmd := exec.CommandContext(ctx, "curl", "-sS", "--http1.1", "--tlsv1.3", "--cacert", cert.CertFile, "--rate", "10/s",
			"-w", "connects=%{num_connects}\n", fmt.Sprintf("https://%s/[1-%d]", addr, n))
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		answers := map[int]int{}
		connects, upgraded := 0, false
		var pid2 int
		for sc.Scan() {
			l := sc.Text()
			if v, ok := strings.CutPrefix(l, "connects="); ok {
				c, _ := strconv.Atoi(v)
				connects += c
				continue
			}
			pid, err := strconv.Atoi(l)
			if err != nil {
				t.Fatalf("curl: %q", l)
			}
			answers[pid]++
			if !upgraded {
				upgraded = true
				go syscall.Kill(pid1, syscall.SIGHUP)
			}
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("curl: %v", err)
		}
		pid2 = servingPID(t, s.Expect(t, "serving 2 "))
		rep := s.Expect(t, "report 1 ")
		s.Reap(t, pid1, 30*time.Second)
		if answers[pid1]+answers[pid2] != n || answers[pid2] == 0 || connects != 1 {
			t.Fatalf("answers %v (generation 2 is %d), %d connects; want %d answers from both, 1 connect", answers, pid2, connects, n)
		}
		if !strings.Contains(rep, " tls_handed=1 ") {
			t.Errorf("generation 1's report: %q, want tls_handed=1", rep)
		}
		stop(t, s, pid2, 2)
	})
}
