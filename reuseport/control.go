package reuseport

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrMPTCP is returned by Control for an MPTCP socket when Config.MPTCP is off.
var ErrMPTCP = fmt.Errorf("%w: socket is MPTCP (Go's default since 1.24); call ListenConfig.SetMultipathTCP(false) or set Config.MPTCP", ErrNotSupported)

// Control sets SO_REUSEPORT and c.Options on a socket before bind, for callers
// who keep their own net.ListenConfig:
//
//	lc := net.ListenConfig{Control: cfg.Control}
//	lc.SetMultipathTCP(false)
//
// It cannot set the backlog (package net chooses it) and does not check UIDs or
// the migration policy; Listen does all of that. An MPTCP socket is refused
// with ErrMPTCP unless c.MPTCP is set.
func (c *Config) Control(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		k, proto, err := readKind(int(fd))
		if err != nil {
			serr = err
			return
		}
		if proto == unix.IPPROTO_MPTCP && !c.MPTCP {
			serr = ErrMPTCP
			return
		}
		o := c.Options
		if network == "tcp6" || network == "udp6" {
			o.V6Only = true
		}
		serr = setOptions(int(fd), k, &o)
	})
	if err != nil {
		return os.NewSyscallError("control", err)
	}
	return serr
}
