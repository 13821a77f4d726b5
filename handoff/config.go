package handoff

import (
	"time"

	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/ticket"
	"go.uber.org/zap"
)

// Config configures an Upgrader. The zero value is not usable: Path is required.
type Config struct {
	// Path is the handoff socket: a file path (its directory must not be
	// writable by group or others) or "@name" in the abstract namespace.
	Path string
	// Listen creates fresh sockets, and is what inherited ones are checked
	// against (Options, MPTCP).
	Listen reuseport.Config
	// AllowUIDs widens the peers accepted on the handoff socket, in both
	// directions, beyond our own effective UID.
	AllowUIDs []uint32
	// Timeout bounds every read and write of the protocol, and the connect;
	// default 10 s.
	Timeout time.Duration
	// ReadyTimeout bounds how long a predecessor waits for its successor's
	// Ready after handing the fds over; default 2 min.
	ReadyTimeout time.Duration
	// WarnOnMismatch makes Listen log an inherited socket whose options differ
	// from Listen.Options, instead of failing with *reuseport.OptionMismatchError.
	WarnOnMismatch bool
	// PIDFile, if set, is replaced atomically with our pid by Ready. Its
	// directory is checked like Path's; its temporary name is created
	// without following links, before the predecessor is told anything.
	PIDFile string
	// TicketKeys, if set, are the TLS session-ticket keys handed over with
	// the sockets, so that clients resume their sessions in the successor:
	// New imports the predecessor's into them (ticket.Keys.Import), and the
	// handoff server exports them to a successor that asks (one that passed
	// the peer checks), as a sealed memfd over the handoff socket; see
	// "Session-ticket keys" in the package doc. Install them into the
	// tls.Config that serves (ticket.Keys.Install). A peer of an older
	// release neither asks for nor sends keys: the handoff goes on without.
	TicketKeys *ticket.Keys
	// Logger receives each step of a handoff; nil means no logging.
	Logger *zap.Logger
	// OnHandoff, if set, is called in the process handing its sockets over,
	// once per successor that asked for them: with a nil error once the
	// successor is ready (this process must then stop), else with why the
	// handoff failed (this process keeps serving). It must not block; see
	// stats.Hub.HandoffHook.
	OnHandoff func(Result, error)
}

// Result is a completed upgrade.
type Result struct {
	From, To uint64 // generations before and after
	PID      int    // the new generation's process
	Took     time.Duration
	// Sockets is how many sockets were handed over; set for
	// Config.OnHandoff, 0 from Upgrade (the trigger does not see them).
	Sockets int
}
