package reuseport

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
	"golang.org/x/sys/unix"
)

// sockopt describes one option: how to set it from Options and how to read it.
type sockopt struct {
	name       string
	level, opt int
	tcp        bool // TCP sockets only
	inet6      bool // AF_INET6 sockets only
	// set returns the value to set and whether Options asks for it.
	set func(o *Options) (int, bool)
	// eff stores a value read from the kernel into effective Options.
	eff func(o *Options, v int)
}

func secs(d time.Duration) int { return int((d + time.Second - 1) / time.Second) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ifSet(v int) (int, bool) { return v, v != 0 }

// sockopts is the table of integer options, in digest order.
var sockopts = []sockopt{
	{name: "SO_REUSEPORT", level: unix.SOL_SOCKET, opt: unix.SO_REUSEPORT,
		set: func(*Options) (int, bool) { return 1, true }, eff: func(*Options, int) {}},
	{name: "SO_REUSEADDR", level: unix.SOL_SOCKET, opt: unix.SO_REUSEADDR,
		set: func(*Options) (int, bool) { return 1, true }, eff: func(*Options, int) {}},
	{name: "TCP_DEFER_ACCEPT", level: unix.IPPROTO_TCP, opt: unix.TCP_DEFER_ACCEPT, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(secs(o.DeferAccept)) },
		eff: func(o *Options, v int) { o.DeferAccept = time.Duration(v) * time.Second }},
	{name: "TCP_FASTOPEN", level: unix.IPPROTO_TCP, opt: unix.TCP_FASTOPEN, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(o.FastOpen) },
		eff: func(o *Options, v int) { o.FastOpen = v }},
	{name: "TCP_SAVE_SYN", level: unix.IPPROTO_TCP, opt: unix.TCP_SAVE_SYN, tcp: true,
		set: func(o *Options) (int, bool) { return 1, o.SaveSYN },
		eff: func(o *Options, v int) { o.SaveSYN = v != 0 }},
	{name: "SO_INCOMING_CPU", level: unix.SOL_SOCKET, opt: unix.SO_INCOMING_CPU,
		set: func(o *Options) (int, bool) {
			if o.IncomingCPU == nil {
				return 0, false
			}
			return *o.IncomingCPU, true
		},
		eff: func(o *Options, v int) {
			if v >= 0 {
				o.IncomingCPU = &v
			}
		}},
	{name: "SO_RCVBUF", level: unix.SOL_SOCKET, opt: unix.SO_RCVBUF,
		set: func(o *Options) (int, bool) { return ifSet(o.RecvBuffer) },
		eff: func(o *Options, v int) { o.RecvBuffer = v }},
	{name: "SO_SNDBUF", level: unix.SOL_SOCKET, opt: unix.SO_SNDBUF,
		set: func(o *Options) (int, bool) { return ifSet(o.SendBuffer) },
		eff: func(o *Options, v int) { o.SendBuffer = v }},
	{name: "TCP_NODELAY", level: unix.IPPROTO_TCP, opt: unix.TCP_NODELAY, tcp: true,
		set: func(o *Options) (int, bool) { return 1, o.NoDelay },
		eff: func(o *Options, v int) { o.NoDelay = v != 0 }},
	{name: "SO_KEEPALIVE", level: unix.SOL_SOCKET, opt: unix.SO_KEEPALIVE,
		set: func(o *Options) (int, bool) { return 1, o.KeepAlive.Enable },
		eff: func(o *Options, v int) { o.KeepAlive.Enable = v != 0 }},
	{name: "TCP_KEEPIDLE", level: unix.IPPROTO_TCP, opt: unix.TCP_KEEPIDLE, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(secs(o.KeepAlive.Idle)) },
		eff: func(o *Options, v int) { o.KeepAlive.Idle = time.Duration(v) * time.Second }},
	{name: "TCP_KEEPINTVL", level: unix.IPPROTO_TCP, opt: unix.TCP_KEEPINTVL, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(secs(o.KeepAlive.Interval)) },
		eff: func(o *Options, v int) { o.KeepAlive.Interval = time.Duration(v) * time.Second }},
	{name: "TCP_KEEPCNT", level: unix.IPPROTO_TCP, opt: unix.TCP_KEEPCNT, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(o.KeepAlive.Count) },
		eff: func(o *Options, v int) { o.KeepAlive.Count = v }},
	{name: "IPV6_V6ONLY", level: unix.IPPROTO_IPV6, opt: unix.IPV6_V6ONLY, inet6: true,
		set: func(o *Options) (int, bool) { return boolInt(o.V6Only), true },
		eff: func(o *Options, v int) { o.V6Only = v != 0 }},
	{name: "IP_FREEBIND", level: unix.IPPROTO_IP, opt: unix.IP_FREEBIND,
		set: func(o *Options) (int, bool) { return 1, o.FreeBind },
		eff: func(o *Options, v int) { o.FreeBind = v != 0 }},
	{name: "IP_TRANSPARENT", level: unix.IPPROTO_IP, opt: unix.IP_TRANSPARENT,
		set: func(o *Options) (int, bool) { return 1, o.Transparent },
		eff: func(o *Options, v int) { o.Transparent = v != 0 }},
	{name: "SO_MARK", level: unix.SOL_SOCKET, opt: unix.SO_MARK,
		set: func(o *Options) (int, bool) { return int(o.Mark), o.Mark != 0 },
		eff: func(o *Options, v int) { o.Mark = uint32(v) }},
	{name: "TCP_USER_TIMEOUT", level: unix.IPPROTO_TCP, opt: unix.TCP_USER_TIMEOUT, tcp: true,
		set: func(o *Options) (int, bool) { return ifSet(int(o.UserTimeout / time.Millisecond)) },
		eff: func(o *Options, v int) { o.UserTimeout = time.Duration(v) * time.Millisecond }},
}

// applies reports whether an option applies to a socket of this kind.
func (s *sockopt) applies(k kind) bool {
	return (!s.tcp || k.stream) && (!s.inet6 || k.family == unix.AF_INET6)
}

// kind is what a socket is: family, stream or datagram.
type kind struct {
	family int
	stream bool
}

// setOptions applies o to a fresh socket, before bind.
func setOptions(fd int, k kind, o *Options) error {
	for i := range sockopts {
		s := &sockopts[i]
		v, ok := s.set(o)
		if !ok || !s.applies(k) {
			continue
		}
		if err := unix.SetsockoptInt(fd, s.level, s.opt, v); err != nil {
			return &OptionError{Option: s.name, Value: strconv.Itoa(v), Err: os.NewSyscallError("setsockopt", err)}
		}
	}
	if o.BindToDevice != "" {
		if err := unix.BindToDevice(fd, o.BindToDevice); err != nil {
			return &OptionError{Option: "SO_BINDTODEVICE", Value: o.BindToDevice, Err: os.NewSyscallError("setsockopt", err)}
		}
	}
	if o.Congestion != "" && k.stream {
		if err := unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION, o.Congestion); err != nil {
			return &OptionError{Option: "TCP_CONGESTION", Value: o.Congestion, Err: os.NewSyscallError("setsockopt", err)}
		}
	}
	return nil
}

// OptionError is an option the kernel refused.
type OptionError struct {
	Option string
	Value  string
	Err    error
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("set %s=%s: %v", e.Option, e.Value, e.Err)
}

// Unwrap returns the syscall error.
func (e *OptionError) Unwrap() error { return e.Err }

// readOptions reads every option of the table from a live inet socket whose
// identity s has read, as name=value pairs in table order (the digest) and as
// effective Options.
func readOptions(fd int, s *Socket) (Digest, Options, error) {
	var eff Options
	k := s.kind()
	typ := "dgram"
	if k.stream {
		typ = "stream"
	}
	d := Digest{family: s.Family, typ: s.Type, proto: s.Protocol}
	vals := make([]OptionValue, 0, 6+len(sockopts))
	vals = append(vals, OptionValue{"SO_DOMAIN", familyName(k.family)}, OptionValue{"SO_TYPE", typ}, OptionValue{"SO_PROTOCOL", strconv.Itoa(s.Protocol)})
	if k.stream {
		backlog, listening, err := readBacklog(fd)
		if err != nil {
			return d, eff, err
		}
		eff.Backlog, d.backlog, d.listening = backlog, backlog, listening
		vals = append(vals, OptionValue{"backlog", strconv.Itoa(backlog)})
	}
	for i := range sockopts {
		o := &sockopts[i]
		if !o.applies(k) {
			continue
		}
		v, err := linux.GetsockoptInt(fd, o.level, o.opt)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOPROTOOPT) {
			// MPTCP sockets answer only some TCP options.
			vals = append(vals, OptionValue{o.name, "unsupported"})
			continue
		}
		if err != nil {
			return d, eff, os.NewSyscallError("getsockopt "+o.name, err)
		}
		o.eff(&eff, v)
		vals = append(vals, OptionValue{o.name, strconv.Itoa(v)})
	}
	dev, err := linux.GetsockoptString(fd, unix.SOL_SOCKET, unix.SO_BINDTODEVICE)
	if err != nil {
		return d, eff, os.NewSyscallError("getsockopt SO_BINDTODEVICE", err)
	}
	eff.BindToDevice = dev
	vals = append(vals, OptionValue{"SO_BINDTODEVICE", dev})
	if k.stream {
		cc, err := linux.GetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_CONGESTION)
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOPROTOOPT) {
			cc, err = "unsupported", nil
		}
		if err != nil {
			return d, eff, os.NewSyscallError("getsockopt TCP_CONGESTION", err)
		}
		eff.Congestion = cc
		vals = append(vals, OptionValue{"TCP_CONGESTION", cc})
	}
	d.Values = vals
	return d, eff, nil
}

// readBacklog returns a stream socket's effective backlog (0 if it is not
// listening) and whether it listens. One TCP_INFO call answers both;
// SO_ACCEPTCONN is the fallback for sockets whose TCP_INFO is not a
// listener's (or fails, as for some MPTCP kernels).
func readBacklog(fd int) (int, bool, error) {
	if info, err := linux.TCPInfo(fd); err == nil && info.State == unix.BPF_TCP_LISTEN {
		return int(info.Sacked), true, nil
	}
	acc, err := linux.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	if err != nil {
		return 0, false, os.NewSyscallError("getsockopt SO_ACCEPTCONN", err)
	}
	if acc != 1 {
		return 0, false, nil
	}
	_, b, err := linux.ListenQueue(fd)
	return int(b), true, err
}

func familyName(f int) string {
	switch f {
	case unix.AF_INET:
		return "inet"
	case unix.AF_INET6:
		return "inet6"
	case unix.AF_UNIX:
		return "unix"
	}
	return strconv.Itoa(f)
}
