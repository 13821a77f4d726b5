package sockdiag

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
)

// initPIDNS is the inode of the initial PID namespace (PROC_PID_INIT_INO).
const initPIDNS = "pid:[4026531836]"

// capSysPtrace is CAP_SYS_PTRACE's bit in CapEff.
const capSysPtrace = 19

// Hidden says why Owners cannot see every process that could hold a socket,
// or "" when nothing hides one from it: /proc shows only a PID namespace
// (mounted for one other than the initial), or /proc is mounted with hidepid
// and we lack CAP_SYS_PTRACE. Unreadable fd directories are Owners' to report.
// A /proc that cannot be checked is an error: the caller must assume it hides.
func Hidden() (string, error) {
	if why, err := pidScope(); why != "" || err != nil {
		return why, err
	}
	hide, err := hidepid()
	if err != nil || hide == "" {
		return "", err
	}
	if ok, err := hasPtrace(); err != nil || ok {
		return "", err
	}
	return fmt.Sprintf("%s is mounted with hidepid=%s and we lack CAP_SYS_PTRACE", procRoot, hide), nil
}

// hidepid returns the hidepid option of the /proc mount, "" when it hides
// nothing.
func hidepid() (string, error) {
	f, err := os.Open(procRoot + "/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("sockdiag: mountinfo: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	hide := ""
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) || fields[4] != procRoot || fields[sep+1] != "proc" {
			continue
		}
		hide = "" // the last mount on /proc is the one we see
		for o := range strings.SplitSeq(fields[sep+3], ",") {
			if v, ok := strings.CutPrefix(o, "hidepid="); ok && v != "0" && v != "off" {
				hide = v
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("sockdiag: mountinfo: %w", err)
	}
	return hide, nil
}

// hasPtrace reports whether CAP_SYS_PTRACE is in our effective set.
func hasPtrace() (bool, error) {
	b, err := os.ReadFile(procRoot + "/self/status")
	if err != nil {
		return false, fmt.Errorf("sockdiag: status: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return false, fmt.Errorf("sockdiag: status: CapEff: %w", err)
			}
			return caps&(1<<capSysPtrace) != 0, nil
		}
	}
	return false, fmt.Errorf("sockdiag: status: no CapEff line")
}

// maxTreeDepth bounds the walk up the process tree from one PID.
const maxTreeDepth = 4096

// Suspects returns, in order, the PIDs among pids (processes whose fds self
// could not read) that may hold a socket self created or inherited without
// self having sent it to them over a unix socket. A socket reaches another
// process either that way, which the sender must mark, or by inheritance at
// fork, down the process tree; so a suspect is a process that started no
// earlier than self (ties count) and descends from self's parent: self's
// descendants, its siblings and theirs. When self's parent is PID 1 (or /proc
// shows no parent), every younger process descends from it. A process whose
// start or ancestry cannot be read is kept; one gone meanwhile is dropped.
func Suspects(pids []int, self int) ([]int, error) {
	me, err := readStat(self)
	if err != nil {
		return nil, err
	}
	parent := me.ppid
	var pstart uint64
	if parent > 1 {
		p, err := readStat(parent)
		if err != nil && !gone(err) {
			return nil, err
		}
		if gone(err) { // reparented meanwhile: to PID 1 or a subreaper
			parent = 1
		}
		pstart = p.start
	}
	var out []int
	for _, pid := range pids {
		st, err := readStat(pid)
		if gone(err) {
			continue
		}
		if err != nil || (st.start >= me.start && descends(st, parent, pstart)) {
			out = append(out, pid)
		}
	}
	return out, nil
}

// descends reports whether the process whose stat is st descends from parent
// (itself excluded), or may: a break in the chain counts as yes. No
// descendant started before its ancestor, which ends most walks early.
func descends(st stat, parent int, pstart uint64) bool {
	if parent <= 1 {
		return true
	}
	for range maxTreeDepth {
		if st.ppid == parent {
			return true
		}
		if st.ppid <= 1 || st.start < pstart {
			return false
		}
		var err error
		if st, err = readStat(st.ppid); err != nil {
			return true // an ancestor we cannot read, or gone with its child not yet reparented
		}
	}
	return true
}

// stat is what Suspects reads of /proc/PID/stat.
type stat struct {
	ppid  int    // field 4
	start uint64 // field 22: clock ticks after boot
}

// readStat reads the parent and start time of pid.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, fmt.Errorf("sockdiag: %s/%d/stat: no command name", procRoot, pid)
	}
	fields := strings.Fields(s[i+1:]) // from field 3, state
	if len(fields) < 20 {
		return stat{}, fmt.Errorf("sockdiag: %s/%d/stat: too short", procRoot, pid)
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return stat{}, fmt.Errorf("sockdiag: %s/%d/stat: ppid: %w", procRoot, pid, err)
	}
	t, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return stat{}, fmt.Errorf("sockdiag: %s/%d/stat: starttime: %w", procRoot, pid, err)
	}
	return stat{ppid: ppid, start: t}, nil
}

// pidScope says why /proc shows only one PID namespace, or "". It reads the
// namespace of /proc's PID 1; when that is not allowed (another user namespace
// owns PID 1) or PID 1 is not shown (hidepid=2, which Hidden reports), ours: if it is not the initial one and /proc numbers us as our
// own namespace does (NSpid has one entry), /proc is our namespace's. A /proc
// of an ancestor namespace (NSpid longer) shows all of ours.
func pidScope() (string, error) {
	link, err := os.Readlink(procRoot + "/1/ns/pid")
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) {
		if link, err = os.Readlink(procRoot + "/self/ns/pid"); err == nil && link != initPIDNS {
			var n int
			if n, err = nsPIDs(); err == nil && n > 1 {
				return "", nil
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("sockdiag: pid namespace of %s: %w", procRoot, err)
	}
	if link != initPIDNS {
		return fmt.Sprintf("%s shows only PID namespace %s, not processes outside it", procRoot, link), nil
	}
	return "", nil
}

// nsPIDs counts the entries of NSpid in /proc/self/status.
func nsPIDs() (int, error) {
	b, err := os.ReadFile(procRoot + "/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			return len(strings.Fields(v)), nil
		}
	}
	return 0, fmt.Errorf("sockdiag: %s/self/status: no NSpid line", procRoot)
}

// StartTime returns when pid started, in clock ticks after boot (field 22
// of /proc/PID/stat), as /proc numbers the process.
func StartTime(pid int) (uint64, error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	return st.start, nil
}

// Since returns, in order, the PIDs among pids that started no earlier than
// start (ticks after boot, as StartTime): the processes that can have been
// sent a socket by a process that started at start, or by one of its
// successors, and the descendants of either. A process whose start cannot be
// read is kept; one gone meanwhile is dropped.
func Since(pids []int, start uint64) []int {
	var out []int
	for _, pid := range pids {
		st, err := readStat(pid)
		switch {
		case gone(err):
		case err != nil || st.start >= start:
			out = append(out, pid)
		}
	}
	return out
}
