package zerodrop_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// TestServeUpgradeH2load: h2load (nghttp2, a client nobody here wrote)
// drives HTTP/2 over TLS, 8 connections with up to 16 streams each, while a
// service built on Serve upgrades through handoff 10 times
// (ZERODROP_H2LOAD_UPGRADES). Each old generation's connections are told to
// go away in two steps (a probe PING, GOAWAY 2^31-1 and a PING, then
// net/http's GOAWAY); h2load, which never retries, ends a connection at its
// first GOAWAY. Not one stream may fail, and no drain may lose a connection.
func TestServeUpgradeH2load(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		h2load := netnstest.H2loadPath(t)
		upgrades := 10
		if n, err := strconv.Atoi(os.Getenv("ZERODROP_H2LOAD_UPGRADES")); err == nil && n > 0 {
			upgrades = n // for BENCHMARKS.md: 100
		}
		cert := netnstest.NewCert(t)
		bin := netnstest.ExecutableCopy(t)
		addr := "127.0.0.1:8080"
		s := netnstest.StartSubreaped(t, bin, []string{"ZERODROP_TEST_HELPER=generation", "ZD_ADDR=" + addr,
			"ZD_SOCK=" + filepath.Join(t.TempDir(), "handoff.sock"), "ZD_CERT=" + cert.CertFile, "ZD_KEY=" + cert.KeyFile}, "-test.run=^$")
		pid := servingPID(t, s.Expect(t, "serving 1 "))

		var total netnstest.H2load
		lost := 0
		for gen := 1; gen <= upgrades; gen++ {
			run := netnstest.StartH2load(t, h2load, "https://"+addr+"/", 2*time.Second)
			time.Sleep(500 * time.Millisecond) // the load is under way
			if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			next := servingPID(t, s.Expect(t, fmt.Sprintf("serving %d ", gen+1)))
			lost += reportLost(t, s.Expect(t, fmt.Sprintf("report %d ", gen)))
			if ws := s.Reap(t, pid, 30*time.Second); ws.ExitStatus() != 0 {
				t.Errorf("generation %d exited with %v", gen, ws)
			}
			pid = next
			total.Add(run())
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		lost += reportLost(t, s.Expect(t, fmt.Sprintf("report %d ", upgrades+1)))
		s.Reap(t, pid, 30*time.Second)
		t.Logf("h2load -c 8 -m 16 over %d upgrades: %v; drains lost %d", upgrades, total, lost)
		if total.Succeeded < 100*upgrades || total.Failed != 0 || lost != 0 {
			t.Errorf("h2load %v, drains lost %d connections; want >= %d succeeded, 0 failed, 0 lost", total, lost, 100*upgrades)
		}
	})
}

// reportLost reads the lost count of generationMain's "report <generation>
// <cause> <method> <lost> ..." line.
func reportLost(t *testing.T, line string) int {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 5 {
		t.Fatalf("%q: want report <generation> <cause> <method> <lost> ...", line)
	}
	n, err := strconv.Atoi(f[4])
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return n
}
