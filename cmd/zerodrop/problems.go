package main

import (
	"fmt"
	"strings"

	"github.com/zerodrop/zerodrop/reuseport"
)

// The problem codes. They are stable: scripts may match on them.
const (
	codeMigrationDisabled = "migration-disabled"
	codeQueueOverBacklog  = "queue-over-backlog"
	codeListenOverflows   = "listen-overflows"
	codeCPUUncovered      = "cpu-uncovered"
)

// countersMeaning says what the counters do and do not prove.
const countersMeaning = "Namespace-wide totals. With tcp_migrate_req=0 a closed member's queue is reset and only " +
	"OutRsts/EstabResets move: zero migration counters then prove nothing. TCPMigrateReqSuccess also counts MPTCP " +
	"connections the kernel fast-closed. ListenOverflows/ListenDrops are SYNs dropped by a full queue (the client " +
	"retries about 1 s later); only a rise between two reads (--watch) means it happens now."

// diagnose names what is wrong in r.
func diagnose(r *report) []problem {
	ps := []problem{}
	if p, ok := migrationDisabled(r); ok {
		ps = append(ps, p)
	}
	ps = append(ps, queuesOverBacklog(r)...)
	if p, ok := listenOverflows(r); ok {
		ps = append(ps, p)
	}
	return append(ps, cpusUncovered(r)...)
}

// cpusUncovered: members of a group set SO_INCOMING_CPU, and no member
// prefers some online CPU.
func cpusUncovered(r *report) []problem {
	var ps []problem
	for _, g := range r.Groups {
		covered, unknown, set := map[int]bool{}, 0, false
		for _, m := range g.Members {
			set = set || m.CPU >= 0
			covered[m.CPU] = true
			if m.CPU == reuseport.CPUUnknown {
				unknown++
			}
		}
		var missing []int
		for _, c := range r.OnlineCPUs {
			if !covered[c] {
				missing = append(missing, c)
			}
		}
		if !set || len(missing) == 0 {
			continue
		}
		msg := fmt.Sprintf("%s: %d listeners, members set SO_INCOMING_CPU and none prefers cpus %v of the online %v: "+
			"a SYN handled there goes to whichever member the hash finds first, and no member can step out of the "+
			"group before its stop (drain.Options.StepOut refuses)", hostPort(g), len(g.Members), missing, r.OnlineCPUs)
		if unknown > 0 {
			msg += fmt.Sprintf("; %d members' CPU could not be read (another user's processes need root)", unknown)
		}
		ps = append(ps, problem{Code: codeCPUUncovered, Message: msg,
			Fix: "open a listener per online CPU (reuseport.ListenPerCPU), or give a pool at least as many workers as CPUs, one CPU each"})
	}
	return ps
}

// migrationDisabled: reuseport groups exist and a closing member would reset
// its queue.
func migrationDisabled(r *report) (problem, bool) {
	var groups []string
	for _, g := range r.Groups {
		if len(g.Members) > 1 && !steered(g) {
			groups = append(groups, fmt.Sprintf("%s with %d listeners", hostPort(g), len(g.Members)))
		}
	}
	if len(groups) == 0 || (r.MigrateReq != nil && *r.MigrateReq != 0) {
		return problem{}, false
	}
	p := problem{
		Code: codeMigrationDisabled,
		Message: fmt.Sprintf("reuseport groups exist (%s) and net.ipv4.tcp_migrate_req is 0: closing a member resets "+
			"every connection in its accept queue, and no TcpExt counter shows it (only Tcp.OutRsts)", strings.Join(groups, ", ")),
		Fix: "sysctl -w net.ipv4.tcp_migrate_req=1 in this network namespace (persist it in /etc/sysctl.d/), " +
			"or drain each member's queue before closing it",
	}
	if r.MigrateReq == nil {
		p.Message = fmt.Sprintf("reuseport groups exist (%s) and this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14+): "+
			"closing a member resets every connection in its accept queue", strings.Join(groups, ", "))
		p.Fix = "upgrade to Linux 5.14 or later, or hand the listening sockets to the new process instead of closing them"
	}
	return p, true
}

// queuesOverBacklog: a queue holds more than backlog+1, the most the kernel
// admits by itself, so connections were migrated into it.
func queuesOverBacklog(r *report) []problem {
	var ps []problem
	for _, g := range r.Groups {
		for _, m := range g.Members {
			if uint64(m.Queue) <= uint64(m.Backlog)+1 {
				continue
			}
			ps = append(ps, problem{
				Code: codeQueueOverBacklog,
				Message: fmt.Sprintf("%s inode %d (%s) holds %d connections in its accept queue, more than its backlog %d "+
					"admits (%d): migration from a closed sibling overflowed it, and it drops new SYNs until it accepts them",
					hostPort(g), m.Inode, holders(m), m.Queue, m.Backlog, m.Backlog+1),
				Fix: "give every member of the group the same backlog, large enough for a sibling's queue " +
					"(listen backlog and net.core.somaxconn), and keep every member accepting",
			})
		}
	}
	return ps
}

// listenOverflows: full queues dropped SYNs during --watch.
func listenOverflows(r *report) (problem, bool) {
	if r.Delta == nil || r.Delta.ListenOverflows == 0 {
		return problem{}, false
	}
	var full []string
	for _, g := range r.Groups {
		for _, m := range g.Members {
			if uint64(m.Queue) >= uint64(m.Backlog)+1 {
				full = append(full, fmt.Sprintf("%s inode %d %d/%d", hostPort(g), m.Inode, m.Queue, m.Backlog))
			}
		}
	}
	where := "no queue is full now"
	if len(full) > 0 {
		where = "full now: " + strings.Join(full, ", ")
	}
	return problem{
		Code: codeListenOverflows,
		Message: fmt.Sprintf("TcpExt.ListenOverflows rose by %d (ListenDrops by %d) in %gs: a full accept queue dropped SYNs "+
			"and those clients retry about 1 s later (%s)", r.Delta.ListenOverflows, r.Delta.ListenDrops, r.WatchSeconds, where),
		Fix: "accept faster, or raise the backlog (listen backlog and net.core.somaxconn); check that no member stopped accepting",
	}, true
}

func hostPort(g group) string {
	if strings.Contains(g.Address, ":") {
		return fmt.Sprintf("[%s]:%d", g.Address, g.Port)
	}
	return fmt.Sprintf("%s:%d", g.Address, g.Port)
}

// holders describes the processes holding m, e.g. "pid 12 nginx".
func holders(m member) string {
	if len(m.PIDs) == 0 {
		return "no readable process"
	}
	s := make([]string, len(m.PIDs))
	for i, pid := range m.PIDs {
		s[i] = fmt.Sprintf("%d %s", pid, m.Commands[i])
	}
	return "pid " + strings.Join(s, ", ")
}
