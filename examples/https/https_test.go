package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// envUpgrades raises the number of upgrades of TestUpgradeHTTPS (default
// 5), for example to 100 for BENCHMARKS.md.
const envUpgrades = "ZERODROP_HTTPS_UPGRADES"

// upgrades is TestUpgradeHTTPS's number of upgrades: envUpgrades, or 5.
func upgrades(t *testing.T) int {
	t.Helper()
	v := os.Getenv(envUpgrades)
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		t.Fatalf("%s=%q: want a count from 1 to 1000", envUpgrades, v)
	}
	return n
}

// The built example upgraded N times (5, or ZERODROP_HTTPS_UPGRADES) by
// SIGHUP while curl --http2, curl --http1.1 (a new connection per request)
// and Go's Transport with ForceAttemptHTTP2 (many requests per connection)
// fetch in loops, then stopped by SIGTERM: no request fails and no response
// is incomplete, curl really negotiated h2 (and HTTP/1.1), every generation
// answered, and every process exits 0.
func TestUpgradeHTTPS(t *testing.T) {
	n := upgrades(t)
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Fatalf("curl (Debian package curl) is needed: %v", err)
		}
		bin := netnstest.Build(t, ".", "https")
		sock := filepath.Join(t.TempDir(), "run", "handoff.sock")
		cert := filepath.Join(filepath.Dir(sock), "cert.pem")
		// A fixed port is safe: the namespace is the test's own.
		s := netnstest.StartSubreaped(t, bin, nil, "-addr", "127.0.0.1:8443", "-socket", sock, "-grace", "20s")
		pids := []int{s.ExpectPID(t, "generation 1 serving ")}
		s.Expect(t, "try: curl --http2 --cacert "+cert+" https://127.0.0.1:8443/")
		const url = "https://127.0.0.1:8443/"
		counters := netnstest.Snapshot(t)

		limit := 3*time.Minute + time.Duration(n)*10*time.Second // the loops' bound
		h2 := startCurl(t, curl, "--http2", cert, url, 2, limit)
		h1 := startCurl(t, curl, "--http1.1", cert, url, 2, limit)
		client := goClient(t, cert)
		gl := netnstest.StartGenLoad(t, client, url, 8, limit)
		gl.WaitFor(t, 1, 50)
		last := n + 1
		start := time.Now()
		for gen := 2; gen <= last; gen++ {
			pids = s.Upgrade(t, pids, fmt.Sprintf("generation %d serving ", gen), fmt.Sprintf("generation %d stopped: release", gen-1))
			gl.WaitFor(t, gen, 50)
			h2.waitFor(t, gen)
			h1.waitFor(t, gen)
		}
		took := time.Since(start)
		goRes, h2Res, h1Res := gl.Stop(), h2.stop(), h1.stop()
		t.Logf("%d upgrades in %v", n, took.Round(time.Millisecond))
		t.Logf("Go HTTP/2 Transport: %d responses, by generation %v, failed %v", sum(goRes.ByGen), goRes.ByGen, goRes.Failed)
		for _, c := range []struct {
			name string
			res  curlCounts
		}{{"curl --http2", h2Res}, {"curl --http1.1", h1Res}} {
			t.Logf("%s: %d responses, by generation %v, versions %v, failed %v, incomplete %v",
				c.name, sum(c.res.byGen), c.res.byGen, c.res.versions, c.res.failed, c.res.incomplete)
		}
		if len(goRes.Failed)+len(h2Res.failed)+len(h1Res.failed)+len(h2Res.incomplete)+len(h1Res.incomplete) != 0 {
			t.Errorf("failed requests: Go %v, curl --http2 %v, curl --http1.1 %v; incomplete responses: curl --http2 %v, curl --http1.1 %v; want none",
				goRes.Failed, h2Res.failed, h1Res.failed, h2Res.incomplete, h1Res.incomplete)
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
		s.StopLast(t, pids, fmt.Sprintf("generation %d stopped: ", last))
		// Every curl connection ends with one reset even with no upgrade (one
		// curl request in a fresh namespace: Tcp.OutRsts 1), so resets are
		// logged; a refused or dropped connection attempt would be a loss.
		counters.CheckConnects(t)
	})
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
// until stop, for at most a time limit and 1e5 requests each.
type curlLoop struct {
	mu sync.Mutex
	curlCounts
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// curlCounts is what a curlLoop counted.
type curlCounts struct {
	byGen      map[int]int
	versions   map[string]int // curl's %{http_version} and the server's r.Proto
	failed     map[string]int // curl failed: its error and output
	incomplete map[string]int // a body cut short: curl's exit 18, or 0 with less than the whole line
}

// startCurl starts n loops of curl with the HTTP version flag given
// ("--http2" or "--http1.1"), trusting only cert, for at most limit; a
// cleanup of t stops them.
func startCurl(t *testing.T, curl, version, cert, url string, n int, limit time.Duration) *curlLoop {
	l := &curlLoop{quit: make(chan struct{}), curlCounts: curlCounts{
		byGen: map[int]int{}, versions: map[string]int{}, failed: map[string]int{}, incomplete: map[string]int{}}}
	args := []string{"-sS", "--fail", "--max-time", "10", version, "--cacert", cert, "-w", "%{http_version}\n", url}
	l.wg.Add(n)
	deadline := time.Now().Add(limit)
	for range n {
		go l.loop(curl, args, deadline)
	}
	t.Cleanup(func() { l.stop() })
	return l
}

// loop runs curl with args until stop or deadline and counts each answer:
// curl's failure, an incomplete body, or the generation and versions.
func (l *curlLoop) loop(curl string, args []string, deadline time.Time) {
	defer l.wg.Done()
	for i := 0; i < 1e5 && time.Now().Before(deadline); i++ {
		select {
		case <-l.quit:
			return
		default:
		}
		out, err := exec.Command(curl, args...).CombinedOutput()
		gen, ver, perr := parseCurl(string(out))
		var ee *exec.ExitError
		l.mu.Lock()
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == 18: // CURLE_PARTIAL_FILE
			l.incomplete[fmt.Sprintf("%v: %s", err, out)]++
		case err != nil:
			l.failed[fmt.Sprintf("%v: %s", err, out)]++
		case perr != nil:
			l.incomplete[perr.Error()]++
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
	netnstest.WaitCount(t, fmt.Sprintf("curl requests generation %d answered", gen), 10, func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.byGen[gen]
	})
}

// stop ends the loop (safe to call twice) and returns the counts.
func (l *curlLoop) stop() curlCounts {
	l.once.Do(func() { close(l.quit) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.curlCounts
}

// sum is the total of the counts in m.
func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
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
