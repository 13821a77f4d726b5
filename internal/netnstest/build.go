package netnstest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles the package pkg (a path relative to the test's directory,
// such as ".") into a fresh temporary directory as name and returns the
// binary's path. It runs the go command go test put first in PATH, with
// GOPROXY=off: everything it needs is in the module cache.
func Build(tb testing.TB, pkg, name string) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), name)
	gocmd, err := exec.LookPath("go")
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "GOPROXY=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
