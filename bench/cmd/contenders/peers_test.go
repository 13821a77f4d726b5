package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The HAProxy and Caddy configurations, plain and over TLS: the generation
// (and HAProxy's worker PID) in every reply, the listeners exposed for the
// seamless reload, and the servers themselves accept them (haproxy -c,
// caddy adapt) when installed; CI installs them.
func TestPeerConfigs(t *testing.T) {
	dir := t.TempDir()
	cert, err := netnstest.WriteCert(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := concatFiles(filepath.Join(dir, "h.pem"), cert.CertFile, cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tls := range []bool{false, true} {
		hc := haproxyConf{Dir: dir, Addr: "127.0.0.1:8080", Gen: "7"}
		cc := caddyConf{Dir: dir, Addr: "127.0.0.1:8080", Gen: "7"}
		if tls {
			hc.PEM, cc.Cert, cc.Key = pem, cert.CertFile, cert.KeyFile
		}
		hp, cp := filepath.Join(dir, "haproxy.cfg"), filepath.Join(dir, "Caddyfile")
		if err := hc.render(hp); err != nil {
			t.Fatal(err)
		}
		if err := cc.render(cp); err != nil {
			t.Fatal(err)
		}
		h, _ := os.ReadFile(hp)
		c, _ := os.ReadFile(cp)
		for _, want := range []string{"master-worker", "expose-fd listeners", "hdr X-Generation 7", `hdr X-Worker "%pid"`} {
			if !strings.Contains(string(h), want) {
				t.Errorf("haproxy.cfg (tls %v) lacks %q:\n%s", tls, want, h)
			}
		}
		if got := strings.Contains(string(h), "ssl crt "+pem+" alpn h2,http/1.1"); got != tls {
			t.Errorf("haproxy.cfg (tls %v): ssl crt %v:\n%s", tls, got, h)
		}
		for _, want := range []string{"admin unix/" + dir + "/caddy-admin.sock", "header X-Generation 7", `respond "ok" 200`} {
			if !strings.Contains(string(c), want) {
				t.Errorf("Caddyfile (tls %v) lacks %q:\n%s", tls, want, c)
			}
		}
		if got := strings.Contains(string(c), "tls "+cert.CertFile); got != tls {
			t.Errorf("Caddyfile (tls %v): tls %v:\n%s", tls, got, c)
		}
		for _, cmd := range [][]string{{"haproxy", "-c", "-f", hp}, {"caddy", "adapt", "--config", cp, "--adapter", "caddyfile"}} {
			if _, err := exec.LookPath(cmd[0]); err != nil {
				if os.Getenv(netnstest.EnvRequirePrivileged) == "1" {
					t.Errorf("%s is not installed", cmd[0])
				}
				continue
			}
			c := exec.Command(cmd[0], cmd[1:]...)
			c.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			if out, err := c.CombinedOutput(); err != nil {
				t.Errorf("%v (tls %v): %v\n%s", cmd, tls, err, out)
			}
		}
	}
}
