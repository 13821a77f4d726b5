package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// build compiles this example into a fresh temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "upgrade")
	gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gocmd, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// server is the first generation of the example and its successors, reaped
// by the test (see netnstest.Subreaped).
type server struct{ *netnstest.Subreaped }

// startServer starts bin with args under netnstest.StartSubreaped: every
// generation ends with the test.
func startServer(t *testing.T, bin string, args ...string) *server {
	t.Helper()
	return &server{netnstest.StartSubreaped(t, bin, nil, args...)}
}

// serving waits for "generation gen serving ... pid P" and returns P.
func (s *server) serving(t *testing.T, gen int) int {
	t.Helper()
	line := s.Expect(t, fmt.Sprintf("generation %d serving ", gen))
	_, p, _ := strings.Cut(line, " pid ")
	pid, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("no pid in %q", line)
	}
	return pid
}
