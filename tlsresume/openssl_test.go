package tlsresume

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// sClient is an openssl s_client process talking to addr.
type sClient struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startSClient(t *testing.T, addr, suite string) *sClient {
	t.Helper()
	path, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl not installed")
	}
	cmd := exec.Command(path, "s_client", "-connect", addr, "-tls1_3", "-ciphersuites", suite, "-crlf", "-servername", "localhost")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sClient{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	return s
}

// expect waits (bounded) for a line of output containing want; it fails on
// the process's end.
func (s *sClient) expect(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok {
				t.Fatalf("openssl s_client ended before %q", want)
			}
			if testing.Verbose() {
				t.Log(l)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q from openssl s_client", want)
		}
	}
}

func (s *sClient) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// TestOpenSSLKeyUpdate: openssl s_client, in each TLS 1.3 suite, sends a
// request, then a KeyUpdate (K: ours requested too, k: its own only); the
// connection is handed over, and its next request is served by Conn.
// (ChaCha20-Poly1305: in the tlsresume/chacha module.)
func TestOpenSSLKeyUpdate(t *testing.T) {
	for _, suite := range allSuites {
		for _, k := range []string{"K", "k", ""} {
			t.Run(tls.CipherSuiteName(suite)+"/"+k, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				s := startTLSServer(t, "first")
				c := startSClient(t, s.addr, tls.CipherSuiteName(suite))
				c.send(t, "GET /one HTTP/1.1\nHost: localhost\n")
				c.expect(t, "first /one")
				s.mu.Lock()
				r := s.recs[0]
				s.mu.Unlock()
				if k != "" {
					c.send(t, k)
					c.expect(t, "KEYUPDATE")
					waitUpdated(t, r, k == "K")
				}
				raw, st := take(t, r)
				if st.Suite != suite {
					t.Fatalf("suite %#04x, want %#04x", st.Suite, suite)
				}
				conn, err := New(raw, st)
				if err != nil {
					t.Fatal(err)
				}
				l, _ := successor(t)
				l.conns <- conn
				c.send(t, "GET /two HTTP/1.1\nHost: localhost\n")
				c.expect(t, "successor /two")
				if k != "" {
					// And a KeyUpdate after the handover, answered by Conn.
					c.send(t, "K")
					c.expect(t, "KEYUPDATE")
					c.send(t, "GET /three HTTP/1.1\nHost: localhost\n")
					c.expect(t, "successor /three")
				}
				if n := s.handshakes.Load(); n != 1 {
					t.Fatalf("%d handshakes, want 1", n)
				}
			})
		}
	}
}

// waitUpdated waits (bounded) until r followed the peer's KeyUpdate (and,
// if requested, our answer).
func waitUpdated(t *testing.T, r *Recorder, both bool) {
	t.Helper()
	for i := 0; i < 400; i++ {
		r.mu.Lock()
		done := r.in.lastPrev && (!both || r.out.lastPrev)
		r.mu.Unlock()
		if done {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the KeyUpdate was not followed")
}

// TestOpenSSLChaChaRefused: an openssl s_client session in
// ChaCha20-Poly1305, with no AEAD registered, is not proven (an
// *UnsupportedSuiteError) and goes on being served by crypto/tls.
func TestOpenSSLChaChaRefused(t *testing.T) {
	netnstest.CheckLeaks(t)
	s := startTLSServer(t, "first")
	c := startSClient(t, s.addr, tls.CipherSuiteName(tls.TLS_CHACHA20_POLY1305_SHA256))
	c.send(t, "GET /one HTTP/1.1\nHost: localhost\n")
	c.expect(t, "first /one")
	s.mu.Lock()
	r := s.recs[0]
	s.mu.Unlock()
	err := prove(r)
	var ue *UnsupportedSuiteError
	if !errors.Is(err, ErrNotProven) || !errors.As(err, &ue) || ue.Suite != tls.TLS_CHACHA20_POLY1305_SHA256 {
		t.Fatalf("ProveIdleHTTP: %v, want ErrNotProven with an *UnsupportedSuiteError", err)
	}
	c.send(t, "GET /two HTTP/1.1\nHost: localhost\n")
	c.expect(t, "first /two")
}
