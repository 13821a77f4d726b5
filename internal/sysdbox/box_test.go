package sysdbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/internal/sockdiag"
)

// TestBoot boots the real systemd and checks the box from both sides: PID 1
// is systemd with container=zerodrop-test, its network namespace is not the
// test's, its /, /tmp, /var/tmp and /run are setup.sh's overlay and tmpfs
// mounts, a unit installed in it runs and logs to its journal, what it
// writes to /tmp and /run stays in it; and after Close the machine's /tmp,
// /var/tmp and /run still hold what they held (a sentinel file in each, 30
// days old, and every entry older than 10 minutes), no process of the box
// runs and its cgroup is gone.
func TestBoot(t *testing.T) {
	netnstest.CheckLeaks(t)
	netnstest.RequirePrivileged(t)
	var sentinels []string
	for _, dir := range []string{"/tmp", "/var/tmp", "/run"} {
		sentinels = append(sentinels, sentinel(t, dir))
	}
	before := map[string][]string{"/tmp": oldEntries(t, "/tmp"), "/run": oldEntries(t, "/run")}

	b := Boot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if got := run(t, b, "cat", "/proc/1/comm"); got != "systemd" {
		t.Errorf("PID 1 of the box is %q, want systemd", got)
	}
	if env, err := os.ReadFile(b.Path("/proc/1/environ")); err != nil || !strings.Contains(string(env), "container=zerodrop-test\x00") {
		t.Errorf("PID 1's environment %q (%v), want container=zerodrop-test", env, err)
	}
	mounts := boxMounts(t, b)
	for mp, want := range map[string]string{"/": "overlay zerodrop-sysdbox", "/tmp": "tmpfs zerodrop-sysdbox", "/var/tmp": "tmpfs zerodrop-sysdbox", "/run": "tmpfs zerodrop-sysdbox"} {
		if got := mounts[mp]; got != want {
			t.Errorf("the box's %s is mounted as %q, want %q", mp, got, want)
		}
	}
	for _, s := range sentinels {
		if got := run(t, b, "sh", "-c", "test -e "+s+" && echo visible || echo hidden"); got != "hidden" {
			t.Errorf("the machine's %s is %s in the box, want hidden", s, got)
		}
	}
	run(t, b, "sh", "-c", "echo box > /tmp/zerodrop-sysdbox-inside && echo box > /run/zerodrop-sysdbox-inside")
	ours, err := sockdiag.NetNS()
	if err != nil {
		t.Fatal(err)
	}
	var boxNS uint64
	if err := b.InNet(func() { boxNS, err = sockdiag.NetNS() }); err != nil || boxNS == 0 || boxNS == ours {
		t.Errorf("InNet: netns %d (%v), the test's is %d: want another", boxNS, err, ours)
	}
	if err := b.Install(ctx, "zerodrop-box-test.service", "[Service]\nType=oneshot\nExecStart=/bin/echo hello from the box\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Systemctl(ctx, "start", "zerodrop-box-test.service"); err != nil {
		t.Fatal(err)
	}
	if j, err := b.WaitJournal(ctx, "zerodrop-box-test.service", "hello from the box\n", 30*time.Second); err != nil {
		t.Errorf("journal of the test unit %q: %v", j, err)
	}
	pid, cg := b.PID, b.cgroup

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
		t.Errorf("kill -0 %d (the box's systemd) after Close: %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the box's cgroup %s after Close: %v, want it removed", cg, err)
	}
	for _, s := range sentinels {
		if _, err := os.Stat(s); err != nil {
			t.Errorf("the machine's %s after the box: %v", s, err)
		}
	}
	for _, p := range []string{"/tmp/zerodrop-sysdbox-inside", "/run/zerodrop-sysdbox-inside"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("the box's %s reached the machine: %v", p, err)
		}
	}
	for dir, names := range before {
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
				t.Errorf("%s/%s, older than 10 minutes, is gone after the box: %v", dir, n, err)
			}
		}
	}
}

// boxMounts maps each mount point of the box's PID 1 to "type source" of
// its last (topmost) mount.
func boxMounts(t *testing.T, b *Box) map[string]string {
	t.Helper()
	mi, err := os.ReadFile(b.Path("/proc/1/mountinfo"))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		pre, post, _ := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) >= 5 && len(g) >= 2 {
			m[f[4]] = g[0] + " " + g[1]
		}
	}
	return m
}

// run runs args in the box and returns the trimmed output.
func run(t *testing.T, b *Box, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := b.Exec(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// sentinel creates a 30-day-old file in dir, removed when the test ends.
func sentinel(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "zerodrop-sysdbox-sentinel-")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	old := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(f.Name(), old, old); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// oldEntries lists dir's entries not modified in the last 10 minutes: on a
// shared machine younger ones may be other tests' and come and go.
func oldEntries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			names = append(names, e.Name())
		}
	}
	return names
}

// A box's cgroup name is not derived from our PID alone: in a PID namespace
// every run child of the restart benchmark is PID 1, and a box left behind
// by a killed one (its cgroup directory stays) made the next fail with
// "create the box's cgroup: mkdir .../zerodrop-sysdbox-1-1: file exists".
// Here the names the first boxes would have had by PID and sequence are taken.
func TestBootCgroupNameTaken(t *testing.T) {
	netnstest.RequirePrivileged(t)
	mnt, err := cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var own string
	for _, l := range strings.Split(string(self), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	// The names of the first 8 boxes of this process by PID and sequence.
	var taken []string
	for i := 1; i <= 8; i++ {
		name := filepath.Join(mnt, own, "zerodrop-sysdbox-"+strconv.Itoa(os.Getpid())+"-"+strconv.Itoa(i))
		if err := os.Mkdir(name, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(name)
		taken = append(taken, name)
	}
	b := Boot(t)
	if slices.Contains(taken, b.cgroup) {
		t.Fatalf("the box took the existing cgroup %s", b.cgroup)
	}
}

// TestTransientMounts: a bpf filesystem another test mounted on its
// zerodrop-bpffs-* directory and unmounted while a box ran is not the box's
// doing (examples/systemd failed so beside reuseport/steer's tests); any
// other mount that went away is.
func TestTransientMounts(t *testing.T) {
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"50 27 0:56 / /tmp/zerodrop-bpffs-469023446 rw,relatime - bpf bpf rw,mode=700", false},
		{"50 27 0:56 / /tmp/zerodrop-bpffs-469023446 rw,relatime - tmpfs tmpfs rw", true},
		{"31 1 0:27 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw", true},
		{"33 1 0:29 / /sys/fs/bpf rw - bpf bpf rw", true},
	} {
		if got := notTransient(tc.line); got != tc.want {
			t.Errorf("notTransient(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}
