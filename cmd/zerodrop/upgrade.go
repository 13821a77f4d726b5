package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/handoff"
	"golang.org/x/sys/unix"
)

// Exit statuses of upgrade.
const (
	exitUpgraded = 0 // a newer generation serves the socket
	exitFailed   = 1 // it does not: the reason is printed
)

// upgradeOpts is the command line of upgrade.
type upgradeOpts struct {
	socket  string
	pid     int
	signal  syscall.Signal
	cmd     []string
	timeout time.Duration
	json    bool
}

// upgradeResult is what upgrade prints (--json: as one object).
type upgradeResult struct {
	OK         bool    `json:"ok"`
	Socket     string  `json:"socket"`
	From       uint64  `json:"from"`                 // generation before
	To         uint64  `json:"to,omitempty"`         // generation serving after a success
	PID        int     `json:"pid,omitempty"`        // the new generation's process
	TookMS     float64 `json:"took_ms"`              // from the first look to the new generation serving (or the failure)
	Generation uint64  `json:"generation,omitempty"` // still serving after a failure
	Reason     string  `json:"reason,omitempty"`     // why it failed
}

func parseUpgrade(args []string, stderr io.Writer) (*upgradeOpts, error) {
	o := &upgradeOpts{}
	fs := flag.NewFlagSet("upgrade", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: zerodrop upgrade --socket PATH (--pid N [--signal HUP] | -- CMD [ARGS...]) [--timeout 2m] [--json]\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.socket, "socket", "", "the handoff socket the server serves (a path or @name); required")
	fs.IntVar(&o.pid, "pid", 0, "signal this process to start its successor (e.g. $MAINPID)")
	sig := fs.String("signal", "HUP", "the signal sent to --pid (name or number)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long to wait for the new generation to serve")
	fs.BoolVar(&o.json, "json", false, "print the result as one JSON object")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.cmd = fs.Args()
	var err error
	switch {
	case o.socket == "":
		err = errors.New("--socket is required")
	case (o.pid > 0) == (len(o.cmd) > 0):
		err = errors.New("give either --pid N or -- CMD ARGS..., not both or neither")
	case o.pid < 0:
		err = fmt.Errorf("--pid %d: not a process id", o.pid)
	case o.timeout <= 0:
		err = fmt.Errorf("--timeout %s: must be positive", o.timeout)
	}
	if err == nil {
		o.signal, err = parseSignal(*sig)
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop upgrade: %v\n", err)
		fs.Usage()
	}
	return o, err
}

// parseSignal reads "HUP", "SIGHUP" or "1".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if n := unix.SignalNum(name); n != 0 {
		return n, nil
	}
	return 0, fmt.Errorf("--signal %q: unknown signal", s)
}

// upgradeMain runs "zerodrop upgrade" and returns the exit status.
func upgradeMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseUpgrade(args, stderr)
	if err != nil {
		return exitUsage
	}
	res := upgrade(ctx, o)
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else if res.OK {
		fmt.Fprintf(stdout, "upgraded %s: generation %d -> %d, pid %d, took %.1f ms\n", res.Socket, res.From, res.To, res.PID, res.TookMS)
	}
	if !res.OK {
		fmt.Fprintf(stderr, "zerodrop upgrade: %s\n", res.Reason)
		return exitFailed
	}
	return exitUpgraded
}

// upgrade checks that a generation serves the socket, starts the next one
// and waits until it serves, or says why not.
func upgrade(ctx context.Context, o *upgradeOpts) upgradeResult {
	res := upgradeResult{Socket: o.socket}
	t0 := time.Now()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeout(ctx, o.timeout)
	defer stop()
	st, ok, err := handoff.Observe(ctx, o.socket)
	switch {
	case err != nil:
		res.Reason = fmt.Sprintf("cannot ask who serves %s: %v", o.socket, err)
		return res
	case !ok:
		res.Reason = fmt.Sprintf("nobody serves the handoff socket %s: start the server instead of upgrading it", o.socket)
		return res
	}
	res.From, res.Generation = st.Generation, st.Generation
	start := func() error { return signalPID(o.pid, o.signal) }
	if len(o.cmd) > 0 {
		start = func() error { return startCmd(o.cmd, cancel) }
	}
	r, err := handoff.Upgrade(ctx, o.socket, start)
	if err == nil {
		res.OK, res.To, res.PID, res.Generation = true, r.To, r.PID, 0
		res.TookMS = float64(r.Took.Microseconds()) / 1000
		return res
	}
	res.Reason = failure(ctx, o, st, err)
	res.TookMS = float64(time.Since(t0).Microseconds()) / 1000
	return res
}

// failure explains err, an *handoff.UpgradeError, to an operator.
func failure(ctx context.Context, o *upgradeOpts, before handoff.Status, err error) string {
	gen := before.Generation
	var ue *handoff.UpgradeError
	if errors.As(err, &ue) {
		gen = ue.Generation
	}
	still := fmt.Sprintf("generation %d still serves", gen)
	if gen == before.Generation {
		still = fmt.Sprintf("generation %d (pid %d) still serves", gen, before.PID)
	}
	switch {
	case context.Cause(ctx) != nil && !errors.Is(context.Cause(ctx), context.Canceled) && !errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return fmt.Sprintf("%v; %s", context.Cause(ctx), still)
	case errors.Is(err, context.DeadlineExceeded):
		why := "the start did nothing, or the new process did not reach Ready"
		if o.pid > 0 && o.pid != before.PID {
			why = fmt.Sprintf("--pid %d is not the process serving the socket", o.pid)
		}
		return fmt.Sprintf("timeout: no newer generation served %s within %s; %s (%s)", o.socket, o.timeout, still, why)
	case ue != nil && ue.Reason == "start failed":
		return fmt.Sprintf("could not start the new generation: %v; %s", ue.Err, still)
	case ue != nil && ue.Reason != "" && ue.Err == nil:
		return fmt.Sprintf("the handoff failed (%s); %s", ue.Reason, still)
	}
	return err.Error()
}

// signalPID asks the running generation to start its successor.
func signalPID(pid int, sig syscall.Signal) error {
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("signal %s to pid %d: %w", unix.SignalName(sig), pid, os.NewSyscallError("kill", err))
	}
	return nil
}

// startCmd starts argv, the new generation or a launcher of it, which
// outlives this command; its output goes to our stderr. If it exits with an
// error before the upgrade is done, fail cancels the wait with that reason.
func startCmd(argv []string, fail context.CancelCauseFunc) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		if err := cmd.Wait(); err != nil {
			fail(fmt.Errorf("%s (pid %d) exited: %w", argv[0], cmd.Process.Pid, err))
		}
	}()
	return nil
}
