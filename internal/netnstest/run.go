package netnstest

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
)

// Keep leaves net.ipv4.tcp_migrate_req at the new namespace's default (0).
const Keep = -1

// Options configures the namespace Run creates.
type Options struct {
	// MigrateReq is written to net.ipv4.tcp_migrate_req in the new namespace
	// (0 or 1); Keep leaves it alone.
	MigrateReq int
	// PIDNamespace also gives the child a PID namespace of its own (it is
	// PID 1 there) while it keeps the parent's /proc mount, as a harness or
	// container runtime that does not remount /proc: os.Getpid() then
	// differs from the PIDs /proc shows.
	PIDNamespace bool
}

const envChild = "ZERODROP_NETNS_TEST"

// doneMarker is printed by the child after the body returned and its cleanups ran.
const doneMarker = "netnstest: body done: "

// Run runs body in a fresh network namespace, in a re-execution of the test
// binary that runs only t. Code before Run in the test function runs in both
// processes; code after it only in the parent.
func Run(t *testing.T, opts Options, body func(t *testing.T)) {
	t.Helper()
	if os.Getenv(envChild) == t.Name() {
		runChild(t, opts, body)
		return
	}
	RequirePrivileged(t)
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-5*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+runPattern(t.Name()), "-test.v=true", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+t.Name())
	flags := uintptr(syscall.CLONE_NEWNET)
	if opts.PIDNamespace {
		flags |= syscall.CLONE_NEWPID
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil || testing.Verbose() {
		t.Logf("namespace child output:\n%s", out)
	}
	if err != nil {
		t.Fatalf("namespace child: %v", err)
	}
	if m := regexp.MustCompile(`--- SKIP: ` + regexp.QuoteMeta(t.Name()) + ` `).Find(out); m != nil {
		t.Skipf("skipped in the namespace child (see its output)")
	}
	if !strings.Contains(string(out), doneMarker+t.Name()+"\n") {
		t.Fatalf("namespace child exited 0 without running the body of %s", t.Name())
	}
}

// runPattern anchors each part of a (sub)test name for -test.run.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func runChild(t *testing.T, opts Options, body func(t *testing.T)) {
	t.Helper()
	if err := linux.LinkUp("lo"); err != nil {
		t.Fatalf("bring up lo: %v", err)
	}
	if opts.MigrateReq != Keep {
		if err := linux.WriteSysctl(linux.MigrateReq, strconv.Itoa(opts.MigrateReq)); err != nil {
			t.Fatalf("set %s: %v", linux.MigrateReq, err)
		}
	}
	warmNetpoll(t)
	t.Cleanup(func() {
		if !t.Failed() && !t.Skipped() {
			fmt.Print(doneMarker + t.Name() + "\n")
		}
	})
	CheckLeaks(t)
	body(t)
}

// warmNetpoll makes the runtime open its netpoller fds before leaks are counted.
func warmNetpoll(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("warm up netpoll: %v", err)
	}
	l.Close()
}

// BenchInNamespace makes benchmark b run in a fresh network namespace (lo
// up): in the re-executed child (env set), it brings lo up and returns true,
// and the caller measures; in the parent it runs the child with the
// parent's -test.benchtime, -test.count and -test.cpu, and skips (the
// numbers are the child's lines, printed above the parent's SKIP). Root
// only.
func BenchInNamespace(b *testing.B, env string) bool {
	if os.Getenv(env) != "" {
		if err := linux.LinkUp("lo"); err != nil {
			b.Fatalf("bring up lo: %v", err)
		}
		return true
	}
	RequirePrivileged(b)
	args := []string{"-test.run=^$", "-test.bench=^" + b.Name() + "$"}
	for _, name := range []string{"test.benchtime", "test.count", "test.cpu"} {
		if f := flag.Lookup(name); f != nil {
			args = append(args, "-"+name+"="+f.Value.String())
		}
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		b.Fatalf("benchmark child: %v", err)
	}
	b.Skip("measured in a namespace child: see its lines above")
	return false
}
