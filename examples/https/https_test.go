package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The built example upgraded five times by SIGHUP while curl --http2, curl
// --http1.1 (a new connection per request) and Go's Transport with
// ForceAttemptHTTP2 (many requests per connection) fetch in loops, then
// stopped by SIGTERM: no request fails, curl really negotiated h2 (and
// HTTP/1.1), every generation answered, and every process exits 0.
func TestUpgradeHTTPS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Fatalf("curl (Debian package curl) is needed: %v", err)
		}
		bin := build(t)
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		cert := filepath.Join(filepath.Dir(sock), "cert.pem")
		// A fixed port is safe: the namespace is the test's own.
		s := &server{netnstest.StartSubreaped(t, bin, nil, "-addr", "127.0.0.1:8443", "-socket", sock, "-grace", "20s")}
		pids := []int{s.serving(t, 1)}
		s.Expect(t, "try: curl --http2 --cacert "+cert+" https://127.0.0.1:8443/")
		const url = "https://127.0.0.1:8443/"
		counters := netnstest.Snapshot(t)

		h2 := startCurl(t, curl, "--http2", cert, url, 2)
		h1 := startCurl(t, curl, "--http1.1", cert, url, 2)
		client := goClient(t, cert)
		gl := netnstest.StartGenLoad(t, client, url, 8, 3*time.Minute)
		gl.WaitFor(t, 1, 50)
		const last = 6
		for gen := 2; gen <= last; gen++ {
			if err := syscall.Kill(pids[len(pids)-1], syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, s.serving(t, gen))
			s.Expect(t, fmt.Sprintf("generation %d stopped: release", gen-1))
			gl.WaitFor(t, gen, 50)
			h2.waitFor(t, gen)
			h1.waitFor(t, gen)
		}
		goRes, h2Res, h1Res := gl.Stop(), h2.stop(), h1.stop()
		t.Logf("Go HTTP/2 Transport: by generation %v, failed %v", goRes.ByGen, goRes.Failed)
		t.Logf("curl --http2: by generation %v, versions %v, failed %v", h2Res.byGen, h2Res.versions, h2Res.failed)
		t.Logf("curl --http1.1: by generation %v, versions %v, failed %v", h1Res.byGen, h1Res.versions, h1Res.failed)
		if len(goRes.Failed)+len(h2Res.failed)+len(h1Res.failed) != 0 {
			t.Errorf("failed requests: Go %v, curl --http2 %v, curl --http1.1 %v; want none", goRes.Failed, h2Res.failed, h1Res.failed)
		}
		if len(h2Res.versions) != 1 || h2Res.versions["2 HTTP/2.0"] == 0 {
			t.Errorf("curl --http2 negotiated %v, want only h2", h2Res.versions)
		}
		if len(h1Res.versions) != 1 || h1Res.versions["1.1 HTTP/1.1"] == 0 {
			t.Errorf("curl --http1.1 negotiated %v, want only HTTP/1.1", h1Res.versions)
		}
		for g := 1; g <= last; g++ {
			if goRes.ByGen[g] == 0 {
				t.Errorf("generation %d answered no request of the Go client", g)
			}
		}
		if proto := goProto(t, client, url); proto != "HTTP/2.0" {
			t.Errorf("Go client after the last upgrade: %s, want HTTP/2.0", proto)
		}
		client.CloseIdleConnections()
		for _, pid := range pids[:last-1] {
			if ws := s.Reap(t, pid, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
				t.Errorf("old generation pid %d: %v, want exit 0", pid, ws)
			}
		}
		final := pids[last-1]
		if got := s.Running(); len(got) != 1 || got[0] != final {
			t.Errorf("server processes %v, want only generation %d's %d", got, last, final)
		}
		syscall.Kill(final, syscall.SIGTERM)
		s.Expect(t, fmt.Sprintf("generation %d stopped: ", last))
		if ws := s.Reap(t, final, 60*time.Second); !ws.Exited() || ws.ExitStatus() != 0 {
			t.Errorf("generation %d after SIGTERM: %v, want exit 0", last, ws)
		}
		// Every curl connection ends with one reset even with no upgrade (one
		// curl request in a fresh namespace: Tcp.OutRsts 1), so resets are
		// logged; a refused or dropped connection attempt would be a loss.
		d := counters.Delta(t, "Tcp.ActiveOpens", "Tcp.PassiveOpens", "Tcp.AttemptFails", "Tcp.EstabResets",
			"Tcp.OutRsts", "TcpExt.ListenOverflows", "TcpExt.ListenDrops")
		t.Logf("counters over the test: %v", d)
		if d["Tcp.AttemptFails"]+d["TcpExt.ListenOverflows"]+d["TcpExt.ListenDrops"] != 0 {
			t.Errorf("failed connection attempts or listen drops: %v, want none", d)
		}
	})
}

// build compiles this example into a fresh temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "https")
	gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// server is the first generation of the example and its successors.
type server struct{ *netnstest.Subreaped }

// serving waits for "generation gen serving ... pid P" and returns P.
func (s *server) serving(t *testing.T, gen int) int {
	t.Helper()
	line := s.Expect(t, fmt.Sprintf("generation %d serving ", gen))
	_, p, _ := strings.Cut(line, " pid ")
	pid, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("no pid in %q", line)
	}
	return pid
}

// goClient is Go's Transport with ForceAttemptHTTP2, trusting only cert.
func goClient(t *testing.T, cert string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", cert)
	}
	tr := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	return &http.Client{Timeout: 10 * time.Second, Transport: tr}
}

// goProto does one GET with c and returns the response's protocol.
func goProto(t *testing.T, c *http.Client, url string) string {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Proto
}

// curlLoop is n loops of curl, one process and one connection per request,
// until stop, for at most 3 minutes and 1e5 requests each.
type curlLoop struct {
	mu       sync.Mutex
	byGen    map[int]int
	versions map[string]int // curl's %{http_version} and the server's r.Proto
	failed   map[string]int
	quit     chan struct{}
	once     sync.Once
	wg       sync.WaitGroup
}

// curlCounts is what a curlLoop counted.
type curlCounts struct {
	byGen    map[int]int
	versions map[string]int
	failed   map[string]int
}

// startCurl starts n loops of curl with the HTTP version flag given
// ("--http2" or "--http1.1"), trusting only cert; a cleanup of t stops them.
func startCurl(t *testing.T, curl, version, cert, url string, n int) *curlLoop {
	l := &curlLoop{byGen: map[int]int{}, versions: map[string]int{}, failed: map[string]int{}, quit: make(chan struct{})}
	args := []string{"-sS", "--fail", "--max-time", "10", version, "--cacert", cert, "-w", "%{http_version}\n", url}
	l.wg.Add(n)
	for range n {
		go l.loop(curl, args)
	}
	t.Cleanup(func() { l.stop() })
	return l
}

// loop runs curl with args until stop and counts each answer: curl's
// failure, an incomplete body, or the generation and versions.
func (l *curlLoop) loop(curl string, args []string) {
	defer l.wg.Done()
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; i < 1e5 && time.Now().Before(deadline); i++ {
		select {
		case <-l.quit:
			return
		default:
		}
		out, err := exec.Command(curl, args...).CombinedOutput()
		gen, ver, perr := parseCurl(string(out))
		l.mu.Lock()
		switch {
		case err != nil:
			l.failed[fmt.Sprintf("%v: %s", err, out)]++
		case perr != nil:
			l.failed[perr.Error()]++
		default:
			l.byGen[gen]++
			l.versions[ver]++
		}
		l.mu.Unlock()
	}
}

// parseCurl reads "generation G pid P PROTO\nVERSION\n" and returns G and
// "VERSION PROTO".
func parseCurl(out string) (int, string, error) {
	var gen, pid int
	var proto, ver string
	if n, _ := fmt.Sscanf(out, "generation %d pid %d %s\n%s\n", &gen, &pid, &proto, &ver); n != 4 {
		return 0, "", fmt.Errorf("incomplete response %q", out)
	}
	return gen, ver + " " + proto, nil
}

// waitFor waits up to 60 s until generation gen has answered 10 requests.
func (l *curlLoop) waitFor(t *testing.T, gen int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l.mu.Lock()
		got := l.byGen[gen]
		l.mu.Unlock()
		if got >= 10 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation %d answered %d curl requests in 60 s, want 10", gen, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the loop (safe to call twice) and returns the counts.
func (l *curlLoop) stop() curlCounts {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return curlCounts{byGen: l.byGen, versions: l.versions, failed: l.failed}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true}, {[]string{"-addr", ":0", "-cert", "c.pem", "-key", "k.pem", "-grace", "1s"}, true},
		{[]string{"-cert", "c.pem"}, false}, {[]string{"-grace", "soon"}, false}, {[]string{"extra"}, false},
	} {
		if _, err := parseFlags(tc.args, io.Discard); (err == nil) != tc.ok {
			t.Errorf("parseFlags(%q) = %v, want ok=%v", tc.args, err, tc.ok)
		}
	}
}
