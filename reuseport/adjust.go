package reuseport

import (
	"fmt"
	"strconv"
)

// Adjustment is an option the kernel set to another value than asked.
type Adjustment struct {
	Option string `json:"option"`
	Asked  string `json:"asked"`
	Got    string `json:"got"`
	Why    string `json:"why"`
}

// adjustments compares what was asked with what the kernel reports.
func adjustments(asked, got *Options, e endpoint) []Adjustment {
	var out []Adjustment
	add := func(opt, a, g, why string) {
		if a != g {
			out = append(out, Adjustment{Option: opt, Asked: a, Got: g, Why: why})
		}
	}
	if e.kind.stream {
		a := strconv.Itoa(asked.Backlog)
		if asked.Backlog == 0 {
			a = "0 (somaxconn)"
		}
		add("backlog", a, strconv.Itoa(got.Backlog), "the kernel clamps the backlog to net.core.somaxconn")
		if asked.DeferAccept != 0 {
			add("TCP_DEFER_ACCEPT", asked.DeferAccept.String(), got.DeferAccept.String(), "the kernel rounds to SYN-ACK retransmission times")
		}
	}
	for _, b := range []struct {
		name     string
		ask, got int
	}{{"SO_RCVBUF", asked.RecvBuffer, got.RecvBuffer}, {"SO_SNDBUF", asked.SendBuffer, got.SendBuffer}} {
		if b.ask != 0 {
			why := "the kernel doubles the size for bookkeeping"
			if b.got != 2*b.ask {
				why = fmt.Sprintf("the kernel doubles the size and clamps it to net.core.%cmem_max (or raises it to its minimum)", map[string]byte{"SO_RCVBUF": 'r', "SO_SNDBUF": 'w'}[b.name])
			}
			add(b.name, strconv.Itoa(b.ask), strconv.Itoa(b.got), why)
		}
	}
	return out
}
