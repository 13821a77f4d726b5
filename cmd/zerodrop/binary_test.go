package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// The built command, end to end: a reuseport group with migration off gives
// exit status 1 and the problem, in JSON and in the table.
func TestBinary(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "zerodrop")
		gocmd, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
		if err != nil {
			t.Fatal(err)
		}
		build := exec.Command(gocmd, "build", "-o", bin, ".")
		build.Env = append(os.Environ(), "GOPROXY=off") // everything is in the module cache
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		l := listen(t, "127.0.0.1:0", 0)
		listen(t, l.Addr().String(), 0)
		p := strconv.Itoa(port(l))

		out, code := runBinary(t, bin, "doctor", "--json", "--port", p)
		var r report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		if code != exitProblems || !slices.Equal(codes(r), []string{codeMigrationDisabled}) {
			t.Errorf("exit %d, problems %+v; want 1, [%s]", code, r.Problems, codeMigrationDisabled)
		}
		if len(r.Groups) != 1 || len(r.Groups[0].Members) != 2 || !slices.Equal(r.Groups[0].Members[0].PIDs, []int{os.Getpid()}) {
			t.Errorf("groups %+v, want one of 2 members held by pid %d", r.Groups, os.Getpid())
		}

		out, code = runBinary(t, bin, "doctor")
		for _, want := range []string{"tcp_migrate_req = 0", "127.0.0.1:" + p, "migration-disabled: ", "fix: sysctl -w net.ipv4.tcp_migrate_req=1"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		if code != exitProblems {
			t.Errorf("exit %d, want 1", code)
		}
	})
}

// runBinary runs bin and returns its stdout and exit status.
func runBinary(t *testing.T, bin string, args ...string) ([]byte, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out, ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return out, 0
}
