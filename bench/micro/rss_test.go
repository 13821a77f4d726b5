package micro

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkWorkerRSS builds bench/cmd/worker-plain (net.Listen,
// http.Server) and bench/cmd/worker-zerodrop (handoff, reuseport,
// drain.Server), sends each 2000 requests on new connections from 8
// goroutines, and reports each one's VmRSS afterwards (median over b.N
// runs) and the difference (want at most 1024 KiB).
func BenchmarkWorkerRSS(b *testing.B) {
	dir := b.TempDir()
	bins := map[string]string{}
	for _, w := range []string{"worker-plain", "worker-zerodrop"} {
		bins[w] = filepath.Join(dir, w)
		out, err := exec.Command("go", "build", "-o", bins[w], "../cmd/"+w).CombinedOutput()
		if err != nil {
			b.Fatalf("build %s: %v\n%s", w, err, out)
		}
	}
	var plain, zd []int
	b.ResetTimer()
	for range b.N {
		plain = append(plain, workerRSS(b, bins["worker-plain"]))
		zd = append(zd, workerRSS(b, bins["worker-zerodrop"]))
	}
	p, z := medianInt(plain), medianInt(zd)
	b.ReportMetric(float64(p), "plain-KiB")
	b.ReportMetric(float64(z), "zerodrop-KiB")
	b.ReportMetric(float64(z-p), "delta-KiB")
}

// workerRSS starts the worker at path, loads it, reads its RSS and stops it.
func workerRSS(b *testing.B, path string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Errorf("%s: %v", path, err)
		}
	}()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("%s: no address: %v", path, err)
	}
	base := "http://" + strings.TrimSpace(addr)
	cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	defer cl.CloseIdleConnections()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				if _, err := get(cl, base+"/"); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := get(cl, base+"/rss")
	if err != nil {
		b.Fatal(err)
	}
	kib, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		b.Fatalf("%s: /rss: %q", path, v)
	}
	return kib
}

func get(cl *http.Client, url string) (string, error) {
	resp, err := cl.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

func medianInt(v []int) int {
	slices.Sort(v)
	return v[len(v)/2]
}
