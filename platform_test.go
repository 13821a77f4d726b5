package zerodrop_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// The library's packages, and the optional modules' (which have their own
// go.mod, so ./... here does not reach them).
var platformPatterns = []string{"./...", "./reuseport/steer/...", "./stats/promstats/...", "./internal/load/...", "./tlsresume/chacha/..."}

const linuxOnly = "undefined: zerodrop_supports_Linux_only"

// TestOtherSystems: the module is Linux-only, and a build for another system
// says so: it fails, and every compile error it prints is the one undefined
// name of a zerodrop_other.go (not a scatter of missing unix constants).
// Every package has that file, so none builds elsewhere by accident.
// It compiles (the standard library too, once per system in a cold build
// cache: about 30 s); no root needed.
func TestOtherSystems(t *testing.T) {
	goCmd := goCommand(t)
	errLine := regexp.MustCompile(`^\S+\.go:\d+:\d+: `)
	for _, goos := range []string{"darwin", "windows"} {
		t.Run(goos, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			env := append(os.Environ(), "GOOS="+goos, "GOARCH=amd64", "CGO_ENABLED=0")

			list := exec.CommandContext(ctx, goCmd, append([]string{"list", "-e", "-f", "{{.ImportPath}} {{.Name}} {{join .GoFiles \",\"}}"}, platformPatterns...)...)
			list.Env = env
			out, err := list.Output()
			if err != nil {
				t.Fatalf("go list: %v\n%s", err, out)
			}
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 || f[1] == "main" {
					continue // commands build only through the packages they import
				}
				n++
				if len(f) < 3 || !slices.Contains(strings.Split(f[2], ","), "zerodrop_other.go") {
					t.Errorf("package %s has no zerodrop_other.go for GOOS=%s: %q", f[0], goos, line)
				}
			}
			if n < 15 {
				t.Errorf("go list found %d library packages, want at least 15:\n%s", n, out)
			}

			build := exec.CommandContext(ctx, goCmd, append([]string{"build"}, platformPatterns...)...)
			build.Env = env
			out, err = build.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("GOOS=%s go build: %v (ctx %v), want it to fail\n%s", goos, err, ctx.Err(), out)
			}
			errs := 0
			for _, line := range strings.Split(string(out), "\n") {
				if !errLine.MatchString(line) {
					continue
				}
				errs++
				if !strings.Contains(line, linuxOnly) {
					t.Errorf("GOOS=%s: compile error %q does not say zerodrop is Linux-only", goos, line)
				}
			}
			if errs == 0 {
				t.Errorf("GOOS=%s go build printed no %q:\n%s", goos, linuxOnly, out)
			}
		})
	}
}

// goCommand is the go command on PATH (go test puts its own first).
func goCommand(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command: %v", err)
	}
	return p
}
