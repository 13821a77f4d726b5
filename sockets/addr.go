package sockets

import (
	"net"
	"net/netip"
	"strconv"
)

// SameAddr compares two literal addresses ("ip:port", or a unix path); a
// port 0 in want matches any port, and an IPv4-mapped IPv6 address its IPv4
// one.
func SameAddr(want, got string) bool {
	if want == got {
		return true
	}
	w, err1 := netip.ParseAddrPort(want)
	g, err2 := netip.ParseAddrPort(got)
	if err1 != nil || err2 != nil {
		return false
	}
	return w.Addr().Unmap() == g.Addr().Unmap() && (w.Port() == 0 || w.Port() == g.Port())
}

// wantAddr resolves what Listen was asked for into a literal "ip:port" to
// compare with an inherited socket; an empty host is the wildcard.
func wantAddr(network, address string) (string, bool) {
	if network == "unix" {
		return address, true
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return "", false
	}
	if host == "" {
		host = "::"
		if network[len(network)-1] == '4' {
			host = "0.0.0.0"
		}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return "", false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", false
	}
	return netip.AddrPortFrom(ip, uint16(p)).String(), true
}
