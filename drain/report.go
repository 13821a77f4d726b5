package drain

import (
	"net/netip"
	"slices"
	"time"

	"go.uber.org/zap"
)

// Method is how a listener was stopped.
type Method string

// The methods, chosen in this order.
const (
	// MethodRelease: the socket is shared (a handoff, systemd or
	// Options.Shared says so), other processes hold it, or the holder scan
	// cannot prove that none does; we closed our fd and the socket keeps
	// listening, queue included, in the other holders. StillListening says
	// whether it did. When only the scan's gaps chose it, we first accepted
	// what was queued (Accepted), so a last holder's close found the queue
	// empty.
	MethodRelease Method = "release"
	// MethodMigrate: siblings in the reuseport group and
	// net.ipv4.tcp_migrate_req=1; shutdown(SHUT_RDWR) moved the queue to them.
	MethodMigrate Method = "migrate"
	// MethodAccept: no sibling or no migration; we accepted until the queue
	// was empty, handed the connections to Accept, then closed.
	MethodAccept Method = "accept"
	// MethodStepOut: Options.StepOut, and the other members of the group
	// cover every online CPU with SO_INCOMING_CPU (Linux 6.1+). We cleared
	// ours, so the kernel picked us for no new SYN, waited until no
	// handshake that could be ours was in flight, accepted until the queue
	// was empty and shut the socket down: nothing could reach it any more.
	MethodStepOut Method = "step-out"
)

// Report accounts for every connection queued when a listener stopped. It
// marshals to JSON. Counter figures (Migrated, MigrateFailed, OutRsts) are
// deltas of namespace-wide kernel counters; Estimated says when other
// listeners could have moved them too.
type Report struct {
	Addr   string `json:"addr"`
	Method Method `json:"method"`
	Why    string `json:"why"` // what made the method the right one

	Siblings     int    `json:"siblings"`                // other members of the reuseport group
	Shared       string `json:"shared,omitempty"`        // why the socket is known to be shared (a handoff, systemd, Options.Shared)
	OtherHolders []int  `json:"other_holders,omitempty"` // other PIDs holding our socket
	Unreadable   []int  `json:"unreadable,omitempty"`    // PIDs whose fds the holder scan could not read
	// StillListening: after MethodRelease, the socket still listened once
	// our fd was closed, so another process held it. When false with
	// LeftQueued 0, nobody did, and close() dropped (or migrated) the queue.
	StillListening bool `json:"still_listening,omitempty"`
	Migration      bool `json:"migration"` // net.ipv4.tcp_migrate_req was on
	Steered        bool `json:"steered"`   // the Steerer accepted MarkDraining
	// StepOutRefused says why Options.StepOut did not step out (the stop
	// used the method it names instead).
	StepOutRefused string `json:"step_out_refused,omitempty"`
	// StepOutRereads counts the times the step-out read the group again
	// because members were unknown only since their listed holders had
	// exited or let go of them while it was read (a handoff's predecessor
	// exiting): a moment later the group no longer lists them, or lists
	// their new holders. At most maxStepOutRereads per stop; if the group
	// still is not readable then, StepOutRefused says so.
	StepOutRereads int `json:"step_out_rereads,omitempty"`
	// HandshakesAtStepOut is the handshakes in flight on the port when we
	// stepped out (ours are among them; sock_diag does not tell members
	// apart), and HandshakesLeft those still in flight when the wait for
	// them ended (0 unless ctx ended first).
	HandshakesAtStepOut int `json:"handshakes_at_step_out,omitempty"`
	HandshakesLeft      int `json:"handshakes_left,omitempty"`

	QueuedAtStop  int `json:"queued_at_stop"` // accept-queue length when the stop began (TCP_INFO)
	Migrated      int `json:"migrated"`       // TcpExt.TCPMigrateReqSuccess delta
	MigrateFailed int `json:"migrate_failed"` // TcpExt.TCPMigrateReqFailure delta
	Accepted      int `json:"accepted"`       // accepted by this process during the stop
	LeftQueued    int `json:"left_queued"`    // left to the other holders (MethodRelease, the socket still listening or unknown)
	QueueAtClose  int `json:"queue_at_close"` // queue length read right before close (MethodAccept, MethodRelease)
	// Remainder is the queued connections not accounted for above: the kernel
	// may have reset them. With MethodAccept it is QueueAtClose; with
	// MethodRelease, what was queued at our close of a socket that then
	// stopped listening, less what it migrated.
	Remainder int `json:"remainder"`
	OutRsts   int `json:"out_rsts"` // Tcp.OutRsts delta during the stop

	Estimated    bool   `json:"estimated"` // counter figures may include other listeners' events
	EstimateNote string `json:"estimate_note,omitempty"`

	Started     time.Time     `json:"started"`
	InspectTook time.Duration `json:"inspect_ns"` // reading the group and its holders
	DrainTook   time.Duration `json:"drain_ns"`   // applying the method, close included
	Took        time.Duration `json:"took_ns"`    // the whole stop

	Errors []string `json:"errors,omitempty"` // problems met; the stop went on

	// HTTP is filled by Server.Shutdown.
	HTTP *HTTPReport `json:"http,omitempty"`
}

// clone is a deep copy of r, so that callers never share a report.
func (r *Report) clone() *Report {
	if r == nil {
		return nil
	}
	c := *r
	c.OtherHolders = slices.Clone(r.OtherHolders)
	c.Errors = slices.Clone(r.Errors)
	if r.HTTP != nil {
		h := *r.HTTP
		h.Forced = slices.Clone(r.HTTP.Forced)
		c.HTTP = &h
	}
	return &c
}

// finish computes Remainder and Took.
func (r *Report) finish() {
	switch r.Method {
	case MethodAccept, MethodStepOut:
		r.Remainder = r.QueueAtClose
	case MethodMigrate:
		r.Remainder = max(0, r.QueuedAtStop-r.Migrated-r.Accepted)
	default: // MethodRelease: nothing lost unless the socket stopped with our close
		r.Remainder = max(0, r.QueueAtClose-r.LeftQueued-r.Migrated)
	}
	r.Took = time.Since(r.Started)
}

// log writes the report once, as one structured line.
func (r *Report) log(log *zap.Logger) {
	if r == nil || log == nil {
		return
	}
	fields := []zap.Field{
		zap.String("event", "drain.done"), zap.String("addr", r.Addr), zap.String("method", string(r.Method)), zap.String("why", r.Why),
		zap.Int("queued_at_stop", r.QueuedAtStop), zap.Int("migrated", r.Migrated),
		zap.Int("accepted", r.Accepted), zap.Int("left_queued", r.LeftQueued), zap.Int("remainder", r.Remainder),
		zap.Int("out_rsts", r.OutRsts), zap.Bool("estimated", r.Estimated), zap.Duration("took", r.Took),
	}
	if r.Method == MethodRelease {
		fields = append(fields, zap.Bool("still_listening", r.StillListening))
	}
	if r.Method == MethodStepOut {
		fields = append(fields, zap.Int("handshakes_left", r.HandshakesLeft))
	}
	if r.StepOutRereads > 0 {
		fields = append(fields, zap.Int("step_out_rereads", r.StepOutRereads))
	}
	if r.StepOutRefused != "" {
		fields = append(fields, zap.String("step_out_refused", r.StepOutRefused))
	}
	if len(r.Errors) > 0 {
		fields = append(fields, zap.Strings("errors", r.Errors))
	}
	if h := r.HTTP; h != nil && h.HandOverError != "" {
		fields = append(fields, zap.String("handover_error", h.HandOverError))
	}
	if h := r.HTTP; h != nil {
		fields = append(fields, zap.Int("in_flight_at_start", h.InFlightAtStart), zap.Int("completed", h.Completed),
			zap.Int("keepalive_responses", h.KeepAliveResponses), zap.Int("forced", len(h.Forced)),
			zap.Int("idle_closed", h.IdleClosed), zap.Int("idle_closed_tls", h.IdleClosedTLS),
			zap.Int("handed_over", h.HandedOver), zap.Int("handover_returned", h.HandOverReturned), zap.Int("received", h.Received),
			zap.Int("hijacked_notified", h.HijackedNotified), zap.Duration("http_took", h.Took))
		if h.CloseSpread > 0 {
			fields = append(fields, zap.Duration("close_spread", h.CloseSpread))
		}
		if h.HandedOverTLS > 0 || h.TLSNotHandedOver > 0 {
			fields = append(fields, zap.Int("handed_over_tls", h.HandedOverTLS), zap.Int("tls_not_handed_over", h.TLSNotHandedOver))
		}
	}
	if r.Remainder > 0 || (r.HTTP != nil && len(r.HTTP.Forced) > 0) {
		log.Warn("drained with losses", fields...)
		return
	}
	log.Info("drained", fields...)
}

// netipString formats an address the way reuseport.Inspect parses it.
func netipString(ap netip.AddrPort) string {
	return netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()).String()
}
