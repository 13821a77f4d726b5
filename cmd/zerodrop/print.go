package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/zerodrop/zerodrop/reuseport"
)

func writeJSON(w io.Writer, r *report) error {
	if r.Groups == nil {
		r.Groups = []group{}
	}
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// writeTable prints r for a person: the sysctl, one row per listener, the
// counters and the problems.
func writeTable(w io.Writer, r *report) error {
	var b strings.Builder
	mr := "missing (kernel before 5.14)"
	if r.MigrateReq != nil {
		mr = fmt.Sprint(*r.MigrateReq)
	}
	fmt.Fprintf(&b, "net.ipv4.tcp_migrate_req = %s (netns %d)\n\n", mr, r.NetNS)
	if len(r.Groups) == 0 {
		b.WriteString("no TCP listeners\n")
	} else {
		writeGroups(&b, r.Groups)
		writeSteer(&b, r.Groups)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	writeCounters(&b, r)
	if len(r.Problems) == 0 {
		b.WriteString("\nno problems\n")
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "\n%s: %s\n  fix: %s\n", p.Code, p.Message, p.Fix)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeGroups(w io.Writer, groups []group) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tLISTENERS\tINODE\tUID\tQUEUE\tBACKLOG\tCPU\tPIDS")
	for _, g := range groups {
		for i, m := range g.Members {
			addr, n := "", ""
			if i == 0 {
				addr, n = hostPort(g), fmt.Sprint(len(g.Members))
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", addr, n, m.Inode, m.UID, m.Queue, m.Backlog, cpuName(m.CPU), pidList(m))
		}
	}
	tw.Flush()
}

// cpuName shows a member's SO_INCOMING_CPU: "-" when not set, "?" when
// unreadable.
func cpuName(cpu int) string {
	switch cpu {
	case reuseport.CPUNone:
		return "-"
	case reuseport.CPUUnknown:
		return "?"
	}
	return fmt.Sprint(cpu)
}

// writeSteer prints the slot table of each steered group.
func writeSteer(w io.Writer, groups []group) {
	for _, g := range groups {
		if g.Steer == nil {
			continue
		}
		fmt.Fprintf(w, "\nsteering %s (pins %s): %d slot(s) taken\n", hostPort(g), g.Steer.Dir, len(g.Steer.Slots))
		if len(g.Steer.Slots) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  SLOT\tSTATE\tINODE\tCLASS\tWEIGHT\tLOAD\tSTEERED\tMIGRATED-IN\tMIGRATED-OUT\tDROPPED")
		for _, s := range g.Steer.Slots {
			inode := "-"
			if s.Inode != 0 {
				inode = fmt.Sprint(s.Inode)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", s.Index, s.State, inode, s.Class,
				s.Weight, s.Load, s.Steered, s.MigratedIn, s.MigratedOut, s.Dropped)
		}
		tw.Flush()
	}
}

func pidList(m member) string {
	if len(m.PIDs) == 0 {
		return "-"
	}
	s := make([]string, len(m.PIDs))
	for i, pid := range m.PIDs {
		s[i] = fmt.Sprintf("%d(%s)", pid, m.Commands[i])
	}
	return strings.Join(s, " ")
}

func writeCounters(w io.Writer, r *report) {
	fmt.Fprintf(w, "\ncounters: %s\n", counterLine(r.Counters, ""))
	if r.Delta != nil {
		fmt.Fprintf(w, "rise in %gs: %s\n", r.WatchSeconds, counterLine(*r.Delta, "+"))
	}
	fmt.Fprintf(w, "%s\n", wrap(countersMeaning, 100, "  "))
}

func counterLine(c reuseport.Counters, sign string) string {
	return fmt.Sprintf("TCPMigrateReqSuccess %s%d  TCPMigrateReqFailure %s%d  ListenOverflows %s%d  ListenDrops %s%d  OutRsts %s%d  EstabResets %s%d",
		sign, c.MigrateReqSuccess, sign, c.MigrateReqFailure, sign, c.ListenOverflows, sign, c.ListenDrops,
		sign, c.OutRsts, sign, c.EstabResets)
}

// wrap breaks s into lines of at most width bytes, each with indent.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(s) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}
