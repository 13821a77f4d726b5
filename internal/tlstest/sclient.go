package tlstest

import (
	"bufio"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// SClient is an openssl s_client process talking TLS 1.3 to an address.
type SClient struct {
	stdin io.WriteCloser
	lines chan string
}

// StartSClient starts openssl s_client to addr in TLS 1.3 with the one
// suite named (its OpenSSL name, as tls.CipherSuiteName gives it), with
// CRLF line endings and SNI localhost; the test skips if openssl is not
// installed (fails with netnstest.EnvRequirePrivileged set). The process is
// killed when the test ends.
func StartSClient(t testing.TB, addr, suite string) *SClient {
	t.Helper()
	path, err := exec.LookPath("openssl")
	netnstest.SkipUnless(t, err == nil, "openssl not installed (.ci/run installs it)")
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
	s := &SClient{stdin: stdin, lines: make(chan string, 1024)}
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

// Expect waits (bounded) for a line of output containing want; it fails on
// the process's end. An empty want waits for that end instead (the
// connection closed, or CloseInput's close_notify answered).
func (s *SClient) Expect(t testing.TB, want string) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-s.lines:
			if !ok && want == "" {
				return
			}
			if !ok {
				t.Fatalf("openssl s_client ended before %q", want)
			}
			if testing.Verbose() {
				t.Log(l)
			}
			if want != "" && strings.Contains(l, want) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q from openssl s_client", want)
		}
	}
}

// Send writes line and a newline to the process's input (s_client sends
// it with CRLF; a line "K" or "k" alone asks it for a KeyUpdate instead).
func (s *SClient) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// CloseInput ends the process's input: s_client then sends close_notify.
func (s *SClient) CloseInput() { s.stdin.Close() }

// Get sends a GET of path and waits for the answer of Handler(name) to it.
func (s *SClient) Get(t testing.TB, name, path string) {
	t.Helper()
	s.Send(t, "GET "+path+" HTTP/1.1\nHost: localhost\n")
	s.Expect(t, name+" "+path)
}

// KeyUpdate has s_client send a KeyUpdate (k "K": requesting ours too,
// "k": not) and waits until it says it did.
func (s *SClient) KeyUpdate(t testing.TB, k string) {
	t.Helper()
	s.Send(t, k)
	s.Expect(t, "KEYUPDATE")
}
