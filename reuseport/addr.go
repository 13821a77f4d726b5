package reuseport

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"
)

// endpoint is a resolved listen address.
type endpoint struct {
	network string
	kind    kind
	ap      netip.AddrPort
	v6only  bool // forced by tcp6/udp6
}

func (e endpoint) sockaddr() unix.Sockaddr {
	if e.kind.family == unix.AF_INET {
		return &unix.SockaddrInet4{Port: int(e.ap.Port()), Addr: e.ap.Addr().As4()}
	}
	return &unix.SockaddrInet6{Port: int(e.ap.Port()), Addr: e.ap.Addr().As16()}
}

// resolve parses network and address the way package net does for listening:
// an empty host is the wildcard (dual-stack [::] for "tcp"/"udp"), a name is
// resolved and its first IPv4 address preferred.
func resolve(ctx context.Context, network, address string) (endpoint, error) {
	e := endpoint{network: network}
	switch network {
	case "tcp", "tcp4", "tcp6":
		e.kind.stream = true
	case "udp", "udp4", "udp6":
	default:
		return e, net.UnknownNetworkError(network)
	}
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return e, err
	}
	p, err := parsePort(ctx, network, port)
	if err != nil {
		return e, err
	}
	last := network[len(network)-1]
	var ip netip.Addr
	switch {
	case host == "" && last == '4':
		ip = netip.IPv4Unspecified()
	case host == "":
		ip = netip.IPv6Unspecified()
	default:
		ip, err = lookup(ctx, network, host)
		if err != nil {
			return e, err
		}
	}
	ip = ip.Unmap()
	switch {
	case last == '4' && !ip.Is4():
		return e, &net.AddrError{Err: "not an IPv4 address", Addr: host}
	case last == '6' && ip.Is4():
		return e, &net.AddrError{Err: "not an IPv6 address", Addr: host}
	}
	e.kind.family = unix.AF_INET6
	if ip.Is4() {
		e.kind.family = unix.AF_INET
	}
	e.v6only = last == '6'
	e.ap = netip.AddrPortFrom(ip, p)
	return e, nil
}

func parsePort(ctx context.Context, network, s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err == nil {
		if n > 65535 {
			return 0, &net.AddrError{Err: "port out of range", Addr: s}
		}
		return uint16(n), nil
	}
	p, err := net.DefaultResolver.LookupPort(ctx, network, s)
	if err != nil {
		return 0, err
	}
	return uint16(p), nil
}

func lookup(ctx context.Context, network, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return ip, &net.AddrError{Err: "zoned addresses are not supported", Addr: host}
		}
		return ip, nil
	}
	ipnet := map[byte]string{'4': "ip4", '6': "ip6"}[network[len(network)-1]]
	if ipnet == "" {
		ipnet = "ip"
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, ipnet, host)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip, nil
		}
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("lookup %s: no addresses", host)
	}
	return ips[0], nil
}
