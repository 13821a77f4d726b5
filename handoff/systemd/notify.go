package systemd

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/zerodrop/zerodrop/internal/shared"
	"go.uber.org/zap"
)

// EnvNotifySocket names the variable systemd sets for Type=notify services.
const EnvNotifySocket = "NOTIFY_SOCKET"

// Notifier sends sd_notify(3) messages to systemd: the lifecycle of a service
// that hands its listeners from one generation to the next, and the fd store.
//
// The methods of a nil *Notifier (see FromEnv) send nothing and return nil,
// except Store and Remove, which return ErrNoNotifySocket: an fd that was not
// stored must not look stored. A Notifier is safe for concurrent use.
type Notifier struct {
	// Socket is the notify socket: a path, or "@name" for the abstract
	// namespace (systemd's "vsock:" addresses are not supported).
	Socket string
	// Logger receives what the watchdog goroutine cannot return; nil means
	// no logging.
	Logger *zap.Logger
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil when it is unset (the
// process does not run under systemd as Type=notify). NOTIFY_SOCKET is left
// set: a successor started by this process needs it to report itself.
func FromEnv() *Notifier {
	s := os.Getenv(EnvNotifySocket)
	if s == "" {
		return nil
	}
	return &Notifier{Socket: s}
}

// Ready sends READY=1 with STATUS=status (omitted when empty): the listeners are served. status
// should name the generation (for example "generation 3 serving :8080") so
// that "systemctl status" shows which generation systemd believes in.
func (n *Notifier) Ready(status string) error {
	return n.Notify(withStatus(status, daemon.SdNotifyReady)...)
}

// Reloading sends RELOADING=1 with MONOTONIC_USEC (CLOCK_MONOTONIC now, in µs,
// which systemd 253+ requires for Type=notify-reload) and STATUS=status: a
// handoff is running. Send Ready when the new generation serves.
func (n *Notifier) Reloading(status string) error {
	us, err := monotonicUsec()
	if err != nil {
		return &NotifyError{Op: "notify", Socket: n.socket(), Err: err}
	}
	return n.Notify(withStatus(status, daemon.SdNotifyReloading, "MONOTONIC_USEC="+strconv.FormatInt(us, 10))...)
}

// MainPID sends MAINPID=pid: pid (the successor) is now the service's main
// process, so systemd's $MAINPID, its watchdog and its stop logic follow it.
//
// systemd accepts MAINPID= from the current main process with NotifyAccess=main
// (the default for Type=notify); when another process of the unit sends it
// (the successor announcing itself, or an ExecReload= command), the unit needs
// NotifyAccess=all. pid must be in the unit's cgroup, which a child of the main
// process is.
func (n *Notifier) MainPID(pid int) error {
	return n.Notify("MAINPID=" + strconv.Itoa(pid))
}

// Stopping sends STOPPING=1 with STATUS=status: draining has started.
func (n *Notifier) Stopping(status string) error {
	return n.Notify(withStatus(status, daemon.SdNotifyStopping)...)
}

// Status sends STATUS=status alone.
func (n *Notifier) Status(status string) error {
	return n.Notify("STATUS=" + status)
}

// Notify sends one datagram with the given "KEY=value" lines. A line must not
// contain a newline. Errors are *NotifyError (ErrNotify).
func (n *Notifier) Notify(lines ...string) error {
	if n == nil {
		return nil
	}
	msg, err := join(lines)
	if err != nil {
		return &NotifyError{Op: "notify", Socket: n.Socket, State: msg, Err: err}
	}
	if err := n.notify(msg); err != nil {
		return &NotifyError{Op: "notify", Socket: n.Socket, State: msg, Err: err}
	}
	return nil
}

// notify sends msg, with no fd. The environment's notify socket (FromEnv's)
// goes through go-systemd's daemon.SdNotify. SdNotify reads only
// $NOTIFY_SOCKET, so a Notifier for another socket (one set by hand: a
// test's, a supervisor's own) goes through send, the sendmsg that Store
// needs anyway to attach an fd. SdNotify reports "not sent" without an error
// when NOTIFY_SOCKET was unset meanwhile; that is ErrNoNotifySocket here.
func (n *Notifier) notify(msg string) error {
	if err := checkSocket(n.Socket); err != nil {
		return err
	}
	if n.Socket != os.Getenv(EnvNotifySocket) {
		return send(n.Socket, msg, -1)
	}
	sent, err := daemon.SdNotify(false, msg)
	if err == nil && !sent {
		err = ErrNoNotifySocket
	}
	return err
}

// Store sends FDSTORE=1 and FDNAME=name with conn's fd (SCM_RIGHTS): systemd
// keeps a duplicate in the service's fd store and passes it back, named, in
// LISTEN_FDS/LISTEN_FDNAMES at the next start (Activated and Take receive it).
// A stored listening socket keeps its accept queue while no process runs.
// conn stays the caller's and stays open.
//
// The unit needs FileDescriptorStoreMax= above the number of stored fds
// (default 0: systemd drops every FDSTORE=1 message, and sd_notify cannot
// report that). FileDescriptorStorePreserve= (systemd 254+) says how long the
// store lives: "restart" (default) across restarts while the unit is not
// stopped for good, "yes" until the unit is unloaded, "no" only while the unit
// is active. systemd closes stored fds that report POLLHUP or POLLERR (a
// listening socket does not) and merges duplicates of one open file.
func (n *Notifier) Store(name string, conn syscall.Conn) error {
	if n == nil {
		return &NotifyError{Op: "store", State: name, Err: ErrNoNotifySocket}
	}
	msg := "FDSTORE=1\nFDNAME=" + name
	if err := checkFDName(name); err != nil {
		return &NotifyError{Op: "store", Socket: n.Socket, State: msg, Err: err}
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		return &NotifyError{Op: "store", Socket: n.Socket, State: msg, Err: err}
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = send(n.Socket, msg, int(fd)); serr == nil && isSocket(int(fd)) {
			shared.Mark(int(fd), shared.Systemd) // systemd holds it now; drain releases it
		}
	}); err != nil {
		serr = err
	}
	if serr != nil {
		return &NotifyError{Op: "store", Socket: n.Socket, State: msg, Err: serr}
	}
	return nil
}

// Remove sends FDSTOREREMOVE=1 and FDNAME=name: systemd closes every stored fd
// of that name. Call it on a final stop (not a restart) so the port is released.
func (n *Notifier) Remove(name string) error {
	if n == nil {
		return &NotifyError{Op: "remove", State: name, Err: ErrNoNotifySocket}
	}
	msg := "FDSTOREREMOVE=1\nFDNAME=" + name
	if err := checkFDName(name); err != nil {
		return &NotifyError{Op: "remove", Socket: n.Socket, State: msg, Err: err}
	}
	if err := n.notify(msg); err != nil {
		return &NotifyError{Op: "remove", Socket: n.Socket, State: msg, Err: err}
	}
	return nil
}

func (n *Notifier) socket() string {
	if n == nil {
		return ""
	}
	return n.Socket
}

func (n *Notifier) logger() *zap.Logger {
	if n == nil || n.Logger == nil {
		return zap.NewNop()
	}
	return n.Logger
}

// withStatus appends STATUS=status to lines unless status is empty.
func withStatus(status string, lines ...string) []string {
	if status == "" {
		return lines
	}
	return append(lines, "STATUS="+status)
}

func join(lines []string) (string, error) {
	msg := strings.Join(lines, "\n")
	for _, l := range lines {
		if strings.ContainsAny(l, "\n\x00") {
			return msg, fmt.Errorf("line %q contains a newline or NUL", l)
		}
	}
	return msg, nil
}

// checkFDName applies systemd's rules for FDNAME=: 1 to 255 printable ASCII
// characters, no ':' (the separator of LISTEN_FDNAMES).
func checkFDName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("fd name %q: want 1 to 255 characters", name)
	}
	for _, c := range []byte(name) {
		if c < 0x20 || c > 0x7e || c == ':' {
			return fmt.Errorf("fd name %q: want printable ASCII without ':'", name)
		}
	}
	return nil
}

// NotifyError is a notification that could not be sent.
type NotifyError struct {
	Op     string // "notify", "store", "remove" or "watchdog"
	Socket string // the notify socket
	State  string // the message (or the fd name)
	Err    error
}

func (e *NotifyError) Error() string {
	return fmt.Sprintf("sd_notify %s to %q (%q): %v", e.Op, e.Socket, e.State, e.Err)
}

// Is reports whether target is ErrNotify.
func (e *NotifyError) Is(target error) bool { return target == ErrNotify }

// Unwrap returns the cause.
func (e *NotifyError) Unwrap() error { return e.Err }
