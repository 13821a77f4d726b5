package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The worker binary stays lean: none of the harness's plotting, nor the
// harness itself, nor the eBPF library or tableflip (which only their own
// worker binaries link), is linked in.
func TestLean(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, bad := range []string{"gonum.org/", "codeberg.org/", "git.sr.ht/", "github.com/ajstarks/", "github.com/golang/freetype",
			"golang.org/x/image", "github.com/HdrHistogram/", "/bench/cmd/contenders", "/internal/load",
			"github.com/cilium/ebpf", "github.com/cloudflare/tableflip", "/reuseport/steer"} {
			if strings.Contains(pkg, bad) {
				t.Errorf("zdworker links %s", pkg)
			}
		}
	}
}
