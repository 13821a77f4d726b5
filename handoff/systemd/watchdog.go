package systemd

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// Watchdog sends WATCHDOG=1 at half the interval systemd asked for, from one
// goroutine that ends with Stop or with the context given to StartWatchdog.
type Watchdog struct {
	// Interval is WATCHDOG_USEC: systemd kills the service when no ping
	// arrives for this long (WatchdogSec= in the unit).
	Interval time.Duration

	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error // first failed ping
	pings  int
}

// StartWatchdog starts pinging when WATCHDOG_USEC is set and WATCHDOG_PID is
// unset or names this process (go-systemd's daemon.SdWatchdogEnabled reads
// them, as sd_watchdog_enabled(3) does); it returns nil, nil when systemd
// asked for no pings (or for another process's), or a nil Notifier. A
// malformed WATCHDOG_USEC or WATCHDOG_PID is an error. The variables stay set
// for children: after MAINPID= hands the service to a successor, the successor
// pings with WatchdogInterval and Pinger.
func (n *Notifier) StartWatchdog(ctx context.Context) (*Watchdog, error) {
	if n == nil {
		return nil, nil
	}
	iv, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		state := "WATCHDOG_USEC=" + os.Getenv("WATCHDOG_USEC") + "\nWATCHDOG_PID=" + os.Getenv("WATCHDOG_PID")
		return nil, &NotifyError{Op: "watchdog", Socket: n.Socket, State: state, Err: err}
	}
	if iv == 0 {
		return nil, nil
	}
	return n.Pinger(ctx, iv), nil
}

// WatchdogInterval returns WATCHDOG_USEC as a duration, ignoring WATCHDOG_PID:
// 0 when unset, an error when malformed. A successor that became the main
// process with MAINPID= inherited its predecessor's WATCHDOG_PID, so
// StartWatchdog would not ping; it calls Pinger with this interval instead.
// (Our own parsing: go-systemd's SdWatchdogEnabled answers 0 whenever
// WATCHDOG_PID names another process, which is this case.)
func WatchdogInterval() (time.Duration, error) {
	s := os.Getenv("WATCHDOG_USEC")
	if s == "" {
		return 0, nil
	}
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil || us <= 0 {
		return 0, &NotifyError{Op: "watchdog", State: "WATCHDOG_USEC=" + s, Err: fmt.Errorf("want a positive number of microseconds: %v", err)}
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Pinger starts pinging every interval/2 regardless of the environment, for a
// successor that took over the watchdog with MAINPID=. Stop ends it. It
// returns nil (no pings) for a nil Notifier or an interval under 2 ns.
func (n *Notifier) Pinger(ctx context.Context, interval time.Duration) *Watchdog {
	if n == nil || interval < 2 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watchdog{Interval: interval, cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, n)
	return w
}

func (w *Watchdog) run(ctx context.Context, n *Notifier) {
	defer close(w.done)
	t := time.NewTicker(w.Interval / 2)
	defer t.Stop()
	for {
		w.ping(n)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Watchdog) ping(n *Notifier) {
	err := n.Notify(daemon.SdNotifyWatchdog)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pings++
	if err != nil {
		n.logger().Warn("systemd watchdog ping failed", zap.Error(err))
		if w.err == nil {
			w.err = err
		}
	}
}

// Stop ends the pings and waits for the goroutine. Safe to call more than once
// and on a nil *Watchdog.
func (w *Watchdog) Stop() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
}

// Err returns the first failed ping's error, or nil. Every failure is also
// logged to the Notifier's Logger, since nothing else could report it.
func (w *Watchdog) Err() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Pings returns how many pings were attempted so far.
func (w *Watchdog) Pings() int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pings
}
