package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// envRun carries a runSpec, as JSON, to the child that runs it, and
// envWorkerBin the worker binary (workerBin).
const (
	envRun       = "ZD_BENCH_RUN"
	envWorkerBin = "ZD_BENCH_WORKER_BIN"
)

// workerBin is the binary that workers run from (cmd/zdworker, the lean one);
// "" for this binary, which can serve too.
var workerBin string

// mountNS is set in a run child, which has a mount namespace of its own.
var mountNS bool

// spawnRun runs s in a child process in fresh network, PID and mount namespaces,
// and returns the result it prints. When the child exits, the kernel kills
// every process left in its PID namespace.
func spawnRun(ctx context.Context, s runSpec, stderr io.Writer) (runResult, error) {
	self, err := os.Executable()
	if err != nil {
		return runResult{}, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return runResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.maxDuration()+time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), envRun+"="+string(b))
	if workerBin != "" {
		cmd.Env = append(cmd.Env, envWorkerBin+"="+workerBin)
	}
	cmd.Stdout, cmd.Stderr = &out, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		return runResult{}, fmt.Errorf("run %s c=%d: %w", s.Contender, s.Concurrency, err)
	}
	var res runResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return runResult{}, fmt.Errorf("run %s c=%d: result: %w", s.Contender, s.Concurrency, err)
	}
	return res, nil
}

// runChildMain runs the spec in envRun and exits, or returns if this process
// is not a run child.
func runChildMain() {
	v := os.Getenv(envRun)
	if v == "" {
		return
	}
	os.Unsetenv(envRun) // not for the workers
	workerBin = os.Getenv(envWorkerBin)
	os.Unsetenv(envWorkerBin)
	mountNS = true
	var s runSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "run child:", err)
		os.Exit(2)
	}
	res := runOne(context.Background(), s, os.Stderr)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// setupNamespace brings lo up and sets the sysctls of the run's network
// namespace, and makes this process the reaper of its orphans (tableflip's
// upgraded processes).
func setupNamespace(migrateReq int) error {
	if err := linux.LinkUp("lo"); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	if err := linux.WriteSysctl(linux.MigrateReq, strconv.Itoa(migrateReq)); err != nil {
		return err
	}
	if err := linux.WriteSysctl("net.ipv4.ip_local_port_range", "10000 65000"); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("prctl PR_SET_CHILD_SUBREAPER", err)
	}
	return nil
}

// mountBPF mounts a bpf filesystem in dir/bpf, in the run child's own mount
// namespace, after making every mount there private so that nothing
// propagates to the machine's; it all vanishes with the namespace.
func mountBPF(dir string) (string, error) {
	if err := privateMounts("a bpf filesystem"); err != nil {
		return "", err
	}
	bpf := filepath.Join(dir, "bpf")
	if err := os.Mkdir(bpf, 0o700); err != nil {
		return "", err
	}
	if err := unix.Mount("bpf", bpf, "bpf", 0, "mode=0700"); err != nil {
		return "", &os.PathError{Op: "mount bpf", Path: bpf, Err: err}
	}
	return bpf, nil
}

// privateMounts makes every mount of the run child's own mount namespace
// private, so that what it mounts (for what) never propagates to the
// machine's; it fails outside a run child.
func privateMounts(what string) error {
	if !mountNS {
		return fmt.Errorf("%s needs the mount namespace of a run child", what)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return &os.PathError{Op: "make mounts private", Path: "/", Err: err}
	}
	return nil
}
