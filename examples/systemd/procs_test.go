package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// build compiles pkg (relative to this directory) into a fresh temporary
// directory as name.
func build(t *testing.T, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// startServer starts bin with args and env (added to ours) under
// netnstest.StartSubreaped: every process running bin ends with the test.
func startServer(t *testing.T, bin string, env []string, args ...string) *netnstest.Subreaped {
	t.Helper()
	return netnstest.StartSubreaped(t, bin, env, args...)
}
