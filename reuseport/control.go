package reuseport

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrMPTCP is returned by Control for an MPTCP socket when Config.MPTCP is off.
// Package net then falls back to a plain TCP socket and calls Control again.
var ErrMPTCP = fmt.Errorf("%w: socket is MPTCP (Go's default since 1.24); set Config.MPTCP to keep it", ErrNotSupported)

// Control sets SO_REUSEPORT and c.Options on a socket before bind, for callers
// who keep their own net.ListenConfig:
//
//	lc := net.ListenConfig{Control: cfg.Control}
//
// It cannot set the backlog (package net chooses it) and does not check UIDs or
// the migration policy; Listen does all of that. It refuses the values Listen
// refuses (a negative count or duration, an unknown c.Migration) with an
// *OptionError wrapping os.ErrInvalid. Unless c.MPTCP is set, it
// refuses the MPTCP socket Go 1.24+ tries first (with ErrMPTCP), and package
// net falls back to plain TCP, so the listener is IPPROTO_TCP either way;
// lc.SetMultipathTCP(false) skips that first attempt.
func (c *Config) Control(network, address string, rc syscall.RawConn) error {
	if err := c.validate(); err != nil {
		return err
	}
	var serr error
	err := rc.Control(func(fd uintptr) {
		var s Socket
		if err := s.readIdentity(int(fd)); err != nil {
			serr = err
			return
		}
		if s.Protocol == unix.IPPROTO_MPTCP && !c.MPTCP {
			serr = ErrMPTCP
			return
		}
		o := c.Options
		if network == "tcp6" || network == "udp6" {
			o.V6Only = true
		}
		serr = setOptions(int(fd), s.kind(), &o)
	})
	if err != nil {
		return os.NewSyscallError("control", err)
	}
	return serr
}
