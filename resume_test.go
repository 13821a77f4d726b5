package zerodrop_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop"
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// resumeMain is one generation of an HTTPS service built on Serve with a
// handoff socket (ZD_SOCK, ZD_ADDR, the certificate in ZD_CERT and ZD_KEY):
// it answers every request with its pid, and in X-Resumed whether the
// connection resumed a TLS session (the server's DidResume). It prints
// "serving <generation> <pid> <addr>" once served and "report <generation>"
// when Serve returns. ZD_NO_TICKETS=1 sets Options.NoTicketHandoff,
// ZD_TLS_HANDOFF=1 Options.TLSHandoff.
func resumeMain() {
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			w.Header().Set("X-Resumed", strconv.FormatBool(r.TLS.DidResume))
		}
		fmt.Fprintf(w, "%d\n", os.Getpid())
	})}
	cert, err := tls.LoadX509KeyPair(os.Getenv("ZD_CERT"), os.Getenv("ZD_KEY"))
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
	rep, err := zerodrop.Serve(context.Background(), srv, []string{os.Getenv("ZD_ADDR")}, zerodrop.Options{
		Config: zerodrop.Config{
			Handoff:   handoff.Config{Path: os.Getenv("ZD_SOCK")},
			Successor: zerodrop.ReExec,
			Grace:     10 * time.Second,
			OnServing: func(gen uint64, addrs []net.Addr) { fmt.Printf("serving %d %d %s\n", gen, os.Getpid(), addrs[0]) },
		},
		NoTicketHandoff: os.Getenv("ZD_NO_TICKETS") != "",
		TLSHandoff:      os.Getenv("ZD_TLS_HANDOFF") != "",
	})
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(1)
	}
	var handed, refused int
	for _, d := range rep.Drains {
		if d != nil && d.HTTP != nil {
			handed, refused = handed+d.HTTP.HandedOverTLS, refused+d.HTTP.TLSNotHandedOver
		}
	}
	fmt.Printf("report %d %s tls_handed=%d tls_refused=%d\n", rep.Generation, strings.ReplaceAll(rep.Cause, " ", "_"), handed, refused)
}

// resumedGet sends one request on a new connection of c and returns the pid
// that answered and whether the server resumed the TLS session (its
// DidResume, in X-Resumed).
func resumedGet(t *testing.T, c *http.Client, url string) (int, bool) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, body %q", resp.StatusCode, b)
	}
	return pid, resp.Header.Get("X-Resumed") == "true"
}

// sessionClient is an HTTPS client of cert's server, of TLS version v, a new
// connection per request, with a session cache of its own.
func sessionClient(t *testing.T, cert *netnstest.Cert, v uint16) *http.Client {
	cc := cert.Client()
	cc.MinVersion, cc.MaxVersion = v, v
	cc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	tr := &http.Transport{TLSClientConfig: cc, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// sClient runs openssl s_client once against addr (TLS 1.3), sending one
// request, with sess ("-sess_in" or "-sess_out") file, and returns whether
// OpenSSL reports the session reused and the server's X-Resumed.
func sClient(t *testing.T, cert *netnstest.Cert, addr, sess, file string) (reused bool, resumed string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "openssl", "s_client", "-connect", addr, "-servername", "localhost", "-CAfile", cert.CertFile,
		"-verify_return_error", "-tls1_3", "-ign_eof", sess, file)
	cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openssl s_client %s: %v\n%s", sess, err, out)
	}
	s := string(out)
	switch {
	case strings.Contains(s, "Reused, TLSv1.3"):
		reused = true
	case !strings.Contains(s, "New, TLSv1.3"):
		t.Fatalf("openssl s_client %s: neither New nor Reused:\n%s", sess, s)
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "X-Resumed: "); ok {
			resumed = v
		}
	}
	return reused, resumed
}

// TestServeResumesAcrossGenerations: a TLS client that got a session ticket
// from generation 1 of a service built on Serve resumes its session at
// generation 2 (a new process that took over by handoff): the server's
// DidResume is true, for Go's client over TLS 1.3 and 1.2 and for openssl
// s_client (-sess_out, then -sess_in). The control, the same service with
// Options.NoTicketHandoff, shows what the key handoff is for: generation 2
// resumes no session of generation 1.
func TestServeResumesAcrossGenerations(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl not installed (.ci/run installs it): %v", err)
	}
	for _, keys := range []bool{true, false} {
		t.Run(map[bool]string{true: "keys handed over", false: "control without key handoff"}[keys], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				cert := netnstest.NewCert(t)
				bin := netnstest.ExecutableCopy(t)
				dir := t.TempDir()
				addr := "127.0.0.1:8080"
				env := []string{"ZERODROP_TEST_HELPER=resume", "ZD_SOCK=" + filepath.Join(dir, "handoff.sock"), "ZD_ADDR=" + addr,
					"ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile}
				if !keys {
					env = append(env, "ZD_NO_TICKETS=1")
				}
				s := netnstest.StartSubreaped(t, bin, env, "-test.run=^$")
				pid1 := servingPID(t, s.Expect(t, "serving 1 "))
				url := "https://" + addr + "/"

				versions := []uint16{tls.VersionTLS13, tls.VersionTLS12}
				clients := make([]*http.Client, len(versions))
				for i, v := range versions {
					clients[i] = sessionClient(t, cert, v)
					if pid, res := resumedGet(t, clients[i], url); pid != pid1 || res {
						t.Fatalf("TLS %x, first request: pid %d resumed %v, want %d false", v, pid, res, pid1)
					}
					// The same generation resumes (the client has a ticket).
					if pid, res := resumedGet(t, clients[i], url); pid != pid1 || !res {
						t.Fatalf("TLS %x, second request: pid %d resumed %v, want %d true", v, pid, res, pid1)
					}
				}
				sess := filepath.Join(dir, "openssl.sess")
				if reused, res := sClient(t, cert, addr, "-sess_out", sess); reused || res != "false" {
					t.Fatalf("openssl, first: reused %v, X-Resumed %q; want a new session", reused, res)
				}

				if err := syscall.Kill(pid1, syscall.SIGHUP); err != nil {
					t.Fatal(err)
				}
				pid2 := servingPID(t, s.Expect(t, "serving 2 "))
				s.Expect(t, "report 1 ")
				if ws := s.Reap(t, pid1, 30*time.Second); ws.ExitStatus() != 0 {
					t.Errorf("generation 1 exited with %v", ws)
				}

				for i, v := range versions {
					pid, res := resumedGet(t, clients[i], url)
					if pid != pid2 || res != keys {
						t.Errorf("TLS %x after the handoff: pid %d resumed %v, want %d %v", v, pid, res, pid2, keys)
					}
				}
				reused, res := sClient(t, cert, addr, "-sess_in", sess)
				if reused != keys || res != fmt.Sprint(keys) {
					t.Errorf("openssl after the handoff: reused %v, X-Resumed %q; want %v", reused, res, keys)
				}

				if err := syscall.Kill(pid2, syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				s.Expect(t, "report 2 ")
				if ws := s.Reap(t, pid2, 30*time.Second); ws.ExitStatus() != 0 {
					t.Errorf("generation 2 exited with %v", ws)
				}
			})
		})
	}
}
