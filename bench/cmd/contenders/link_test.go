package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkage tells a dynamically linked system binary from a Go program built
// with CGO_ENABLED=0, and warns about the first only.
func TestLinkage(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	static := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-o", static, src)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if l, err := linkage(static); err != nil || l != "static" {
		t.Errorf("linkage(%s) = %q, %v; want static", static, l, err)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := linkage(sh); err != nil || !strings.HasPrefix(l, "dynamic (/") {
		t.Errorf("linkage(%s) = %q, %v; want dynamic with an interpreter", sh, l, err)
	}
	if _, err := linkage(src); err == nil {
		t.Errorf("linkage of a source file: no error")
	}
	var w bytes.Buffer
	got := workerLinkage([]string{static, sh}, &w)
	if !strings.Contains(got, "`"+static+"` static") || !strings.Contains(got, "`"+sh+"` dynamic") {
		t.Errorf("workerLinkage = %q", got)
	}
	if warn := w.String(); strings.Contains(warn, static) || !strings.Contains(warn, sh+" is dynamically linked") {
		t.Errorf("warnings = %q; want one, for %s", warn, sh)
	}
}
