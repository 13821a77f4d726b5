package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// --metrics prints, under the table, the zerodrop_ samples of one server of
// the strategy: for migrate with 2 workers and 1 restart, a generation of
// the run (1 and 2 start, 3 replaces one of them), the sysctl the strategy
// set, and a group of exactly the 2 workers left.
func TestMetricsFlag(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		out := string(runCommand(t, nil, "--metrics", "--duration", "2s", "--concurrency", "16", "--workers", "2",
			"--restarts", "1", "--timeout", "10s", "--strategies", "migrate"))
		t.Logf("stdout:\n%s", out)
		_, after, ok := strings.Cut(out, "migrate: /metrics of one server after the last restart:\n")
		if !ok {
			t.Fatalf("no metrics heading for migrate in:\n%s", out)
		}
		for _, re := range []string{
			`(?m)^  zerodrop_generation [123]$`,
			`(?m)^  zerodrop_kernel_tcp_migrate_req 1$`,
			`(?m)^  zerodrop_group_members\{listener="http"\} 2$`,
		} {
			if !regexp.MustCompile(re).MatchString(after) {
				t.Errorf("no line matching %s under the heading:\n%s", re, after)
			}
		}
	})
}

// parseMetrics keeps the zerodrop_ samples, labels included, and nothing else.
func TestParseMetrics(t *testing.T) {
	in := "# HELP zerodrop_generation x\n# TYPE zerodrop_generation gauge\nzerodrop_generation 3\n" +
		"zerodrop_group_members{listener=\"http\"} 2\ngo_goroutines 7\n"
	m, err := parseMetrics(strings.NewReader(in))
	if err != nil || len(m) != 2 || m["zerodrop_generation"] != "3" || m[`zerodrop_group_members{listener="http"}`] != "2" {
		t.Errorf("parseMetrics = %v, %v", m, err)
	}
}
