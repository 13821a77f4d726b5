package handoff

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Status is what the process serving a handoff socket says about itself.
type Status struct {
	Generation uint64
	PID        int
	// Failures counts handoffs that failed since it serves: successors
	// refused for their protocol version, or whose transfer failed (not
	// peers refused for their uid, nor bytes that never made a hello);
	// LastError is the latest reason.
	Failures  uint64
	LastError string
}

// Observe asks the process serving path for its Status. ok is false when
// nobody serves path. The server must have our effective UID.
func Observe(ctx context.Context, path string) (st Status, ok bool, err error) {
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	nc, ok, err := dial(ctx, path)
	if err != nil || !ok {
		return st, false, err
	}
	d, _ := ctx.Deadline()
	c, err := newConn(nc, time.Until(d))
	if err != nil {
		nc.Close()
		return st, false, err
	}
	defer c.Close()
	// The server's credentials are those of what it writes (see
	// conn.talkers): SO_PEERCRED names the process that bound the socket.
	c.talkers = func(cred *unix.Ucred) error { return checkPeer(cred, nil) }
	if err = c.send(&frame{Type: typeHello, Version: baseVersion, Role: roleObserver, PID: os.Getpid(), UID: uint32(os.Geteuid())}, nil); err != nil {
		err = c.answeredFirst(err)
	}
	var f *frame
	if err == nil {
		f, _, err = c.recv(0)
	}
	if err == nil {
		err = expect(f, typeHello)
	}
	if err != nil {
		return st, true, pathError("observe", path, err)
	}
	return Status{Generation: f.Generation, PID: f.PID, Failures: f.Failures, LastError: f.LastError}, true, nil
}

// UpgradeError says why an upgrade did not complete: the predecessor's
// account of the failed handoff, or that the wait ended.
type UpgradeError struct {
	Generation uint64 // still serving
	Reason     string
	Err        error // ctx.Err() when the wait ended, or the start error
}

// Error describes the failure.
func (e *UpgradeError) Error() string {
	s := fmt.Sprintf("upgrade: generation %d still serves", e.Generation)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *UpgradeError) Unwrap() error { return e.Err }

// Upgrade is the synchronous trigger: it reads the generation serving path,
// calls start (which starts the new process, or asks a supervisor to), and
// returns once a newer generation serves path, as seen from outside. It
// returns an *UpgradeError as soon as the serving process reports a failed
// handoff (with its reason), or when ctx ends (default bound: 2 min).
// "The command returned 0" is not enough; this is.
func Upgrade(ctx context.Context, path string, start func() error) (Result, error) {
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	t0 := time.Now()
	before, _, err := Observe(ctx, path)
	if err != nil {
		return Result{}, &UpgradeError{Err: err}
	}
	if err := start(); err != nil {
		return Result{}, &UpgradeError{Generation: before.Generation, Reason: "start failed", Err: err}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st, ok, err := Observe(ctx, path)
		switch {
		case ok && err == nil && st.Generation > before.Generation:
			return Result{From: before.Generation, To: st.Generation, PID: st.PID, Took: time.Since(t0)}, nil
		case ok && err == nil && st.PID == before.PID && st.Failures > before.Failures:
			return Result{}, &UpgradeError{Generation: st.Generation, Reason: st.LastError}
		case ok && err == nil && st.PID != before.PID:
			return Result{}, &UpgradeError{Generation: before.Generation,
				Reason: fmt.Sprintf("pid %d of generation %d now serves the handoff socket without having inherited from pid %d", st.PID, st.Generation, before.PID)}
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			// the old process may be exiting; look again
		}
		select {
		case <-ctx.Done():
			return Result{}, &UpgradeError{Generation: before.Generation, Err: ctx.Err()}
		case <-tick.C:
		}
	}
}
