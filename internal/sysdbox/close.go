package sysdbox

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Close powers the box off (SIGRTMIN+4 to its systemd, at most 60 s), then
// kills whatever is left by PID, and checks that every process the
// box had (by PID and start time) is gone, that its cgroup is empty and
// removed, and that the test process lost no mount and gained none of the box's.
// It returns what it found wrong. Safe to call more than once.
func (b *Box) Close() error {
	b.closed.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *Box) close() error {
	var errs []error
	procs := b.processes()
	if !b.poweroff() {
		errs = append(errs, fmt.Errorf("sysdbox: systemd pid %d did not power off within %s; killed", b.PID, poweroffTimeout))
		b.kill()
	}
	errs = append(errs, b.checkGone(procs), b.removeCgroup())
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err != nil {
		errs = append(errs, err)
	} else if gone, added := lineDiff(b.mountinfo, mi); slices.ContainsFunc(gone, notTransient) || slices.ContainsFunc(added, isBoxMount) {
		// Other mounts may appear, and other tests' own transient mounts
		// go: other tests on the machine mount too.
		errs = append(errs, fmt.Errorf("sysdbox: the test process's mounts changed while the box ran: gone %q, added %q", gone, added))
	}
	return errors.Join(errs...)
}

// poweroff sends SIGRTMIN+4 to systemd every 2 s (a signal that arrives
// before systemd installed its handlers is dropped: PID 1 of a namespace
// ignores signals it has no handler for) until the box exits, at most
// poweroffTimeout; it reports whether it did.
func (b *Box) poweroff() bool {
	if b.PID == 0 {
		return false
	}
	deadline := time.After(poweroffTimeout)
	for {
		syscall.Kill(b.PID, sigPoweroff)
		select {
		case <-b.done:
			return true
		case <-deadline:
			return false
		case <-time.After(2 * time.Second):
		}
	}
}

// kill sends SIGKILL to every process of the box's cgroup and to unshare,
// by PID, until unshare has exited (at most killTimeout). Once PID 1 of the
// box is dead the kernel kills the rest of its PID namespace.
func (b *Box) kill() {
	deadline := time.After(killTimeout)
	for {
		for _, pid := range b.cgroupPIDs() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		b.cmd.Process.Kill()
		select {
		case <-b.done:
			return
		case <-deadline:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// process is one PID with its start time, so a reused PID is not mistaken
// for a survivor.
type process struct {
	pid   int
	start string
}

// processes lists unshare and every process in the box's cgroup tree.
func (b *Box) processes() []process {
	pids := append([]int{b.cmd.Process.Pid}, b.cgroupPIDs()...)
	var ps []process
	for _, pid := range pids {
		if st, ok := startTime(pid); ok {
			ps = append(ps, process{pid, st})
		}
	}
	return ps
}

// cgroupPIDs lists the PIDs of the box's cgroup and its descendants.
func (b *Box) cgroupPIDs() []int {
	var pids []int
	filepath.WalkDir(b.cgroup, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.Name() != "cgroup.procs" {
			return nil
		}
		s, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(s)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// checkGone waits up to killTimeout until none of procs runs, then kills
// the survivors and reports them.
func (b *Box) checkGone(procs []process) error {
	deadline := time.Now().Add(killTimeout)
	for {
		var alive []string
		for _, p := range procs {
			if st, ok := startTime(p.pid); ok && st == p.start {
				alive = append(alive, strconv.Itoa(p.pid))
			}
		}
		if left := b.cgroupPIDs(); len(left) > 0 {
			alive = append(alive, fmt.Sprintf("in the cgroup: %v", left))
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			b.kill()
			return fmt.Errorf("sysdbox: processes of the box still ran %s after poweroff: %s (killed)", killTimeout, strings.Join(alive, " "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTime is field 22 of /proc/PID/stat; ok is false once pid is gone.
func startTime(pid int) (string, bool) {
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	i := bytes.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(s[i+1:]))
	if len(f) < 20 {
		return "", false
	}
	if f[0] == "Z" { // a zombie has ended; only its parent's wait is missing
		return "", false
	}
	return f[19], true
}

// removeCgroup removes the box's cgroup tree, deepest first (systemd's
// slices and scopes are left behind empty).
func (b *Box) removeCgroup() error {
	var dirs []string
	filepath.WalkDir(b.cgroup, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("sysdbox: remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// isBoxMount reports whether a mountinfo line looks like one of setup.sh's
// mounts: source zerodrop-sysdbox (its tmpfs and overlay), or an overlay or
// mqueue filesystem.
func isBoxMount(line string) bool {
	_, fs, _ := strings.Cut(line, " - ")
	f := strings.Fields(fs) // type, source, options
	return len(f) >= 2 && (f[1] == "zerodrop-sysdbox" || f[0] == "overlay" || f[0] == "mqueue")
}

// notTransient reports whether a mountinfo line that went away while the box
// ran is one the box could have taken: any but the bpf filesystems other
// tests mount, for their own duration, on a zerodrop-bpffs-* directory
// (netnstest.MountBPF, the benchmark's run child).
func notTransient(line string) bool {
	f := strings.Fields(line) // id, parent, dev, root, mount point, ...
	_, fs, _ := strings.Cut(line, " - ")
	return len(f) < 5 || !strings.HasPrefix(filepath.Base(f[4]), "zerodrop-bpffs-") || !strings.HasPrefix(fs, "bpf ")
}

// lineDiff returns the lines of a missing from b and those of b missing from a.
func lineDiff(a, b []byte) (gone, added []string) {
	in := func(s []byte) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(string(s), "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	for l := range ma {
		if !mb[l] {
			gone = append(gone, l)
		}
	}
	for l := range mb {
		if !ma[l] {
			added = append(added, l)
		}
	}
	return gone, added
}
