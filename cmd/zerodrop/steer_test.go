package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
	"golang.org/x/sys/unix"
)

// A steering group of two members on one port, plus an unjoined listener in
// the same reuseport group and a lone listener elsewhere. Connections go
// where the slot states say: 10 while b drains, 4 while a drains; then b
// closes with its 4 queued and the program migrates them to a, whatever
// tcp_migrate_req (0 here) says. doctor shows exactly those two slots and
// counts, no migration-disabled problem for the steered group, and no steer
// field for the lone listener.
func TestDoctorSteer(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		dir := netnstest.MountBPF(t, "0755")
		cfg := &steer.Config{Dir: dir}
		a := listen(t, "127.0.0.1:0", 0)
		addr := a.Addr().String()
		b := listen(t, addr, 0)
		c := listen(t, addr, 0) // in the reuseport group, not in the steering group
		lone := listen(t, "127.0.0.1:0", 0)
		ma, mb := join(t, cfg, a), join(t, cfg, b)

		drain(t, mb, true)
		netnstest.Queue(t, addr, 10, netnstest.ClientOptions{})
		eventually(t, "10 queued at a", func() bool { return queueLen(t, a) == 10 })
		drain(t, mb, false)
		drain(t, ma, true)
		netnstest.Queue(t, addr, 4, netnstest.ClientOptions{})
		eventually(t, "4 queued at b", func() bool { return queueLen(t, b) == 4 })
		drain(t, ma, false)
		drain(t, mb, true)
		before := netnstest.Snapshot(t)
		b.Close()
		eventually(t, "14 queued at a", func() bool { return queueLen(t, a) == 14 })
		if d := before.Delta(t, "TcpExt.TCPMigrateReqSuccess", "TcpExt.TCPMigrateReqFailure"); d["TcpExt.TCPMigrateReqSuccess"] != 4 || d["TcpExt.TCPMigrateReqFailure"] != 0 {
			t.Errorf("counters rose by %v, want Success 4, Failure 0", d)
		}
		if q := queueLen(t, c); q != 0 {
			t.Errorf("unjoined listener queue %d, want 0 (the program picks only slots)", q)
		}

		r, code := doctorJSON(t, linuxKernel(), "--bpffs", dir)
		if code != exitOK || len(r.Problems) != 0 || len(steerNotes(r)) != 0 {
			t.Errorf("exit %d, problems %+v, notes %q; want 0, none, no steering note", code, r.Problems, r.Notes)
		}
		g, _, ok := find(r, inode(t, a))
		if !ok || len(g.Members) != 2 || g.Steer == nil {
			t.Fatalf("group %+v, want a and c with a steer object", g)
		}
		class := steer.ClassOf(a.Digest())
		want := []steerSlot{
			{Index: ma.Slot(), State: "live", Inode: inode(t, a), Cookie: cookie(t, a), Class: class, Weight: steer.DefaultWeight, Steered: 10, MigratedIn: 4},
			// b is closed: its slot stays draining, with no socket, until mb.Close.
			{Index: mb.Slot(), State: "draining", Inode: 0, Cookie: 0, Class: class, Weight: steer.DefaultWeight, Steered: 4, MigratedOut: 4},
		}
		if !slices.Equal(g.Steer.Slots, want) || g.Steer.Dir != ma.Group().Dir() {
			t.Errorf("steer %+v, want dir %s and slots %+v", g.Steer, ma.Group().Dir(), want)
		}
		if lg, _, ok := find(r, inode(t, lone)); !ok || lg.Steer != nil {
			t.Errorf("lone listener's group %+v: want no steer object", lg)
		}

		out := doctorTable(t, "--bpffs", dir)
		if w := "steering " + addr + " (pins " + ma.Group().Dir() + "): 2 slot(s) taken"; !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
		for _, w := range []string{
			"SLOT STATE INODE CLASS WEIGHT LOAD STEERED MIGRATED-IN MIGRATED-OUT DROPPED",
			fmt.Sprintf("%d live %d %d 100 0 10 4 0 0", ma.Slot(), inode(t, a), class),
			fmt.Sprintf("%d draining - %d 100 0 4 0 4 0", mb.Slot(), class),
		} {
			if !hasRow(out, w) {
				t.Errorf("table lacks the row %q:\n%s", w, out)
			}
		}
	})
}

// Without a bpf filesystem at --bpffs (nothing is mounted in a new netns's
// default place either), doctor works and says so in one note.
func TestDoctorSteerNoBPFFS(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		l := listen(t, "127.0.0.1:0", 0)
		listen(t, "127.0.0.1:0", 0)
		for _, dir := range []string{t.TempDir(), steer.DefaultDir} {
			if dir == steer.DefaultDir && onBPFFS(steer.DefaultDir) {
				continue // mounted on this machine: not the case under test
			}
			r, code := doctorJSON(t, linuxKernel(), "--bpffs", dir)
			if code != exitOK || len(r.Groups) != 2 {
				t.Errorf("--bpffs %s: exit %d, groups %+v; want 0 and both listeners", dir, code, r.Groups)
			}
			if n := steerNotes(r); len(n) != 1 || !strings.Contains(n[0], "not on a bpf filesystem") {
				t.Errorf("--bpffs %s: notes %q, want one saying there is no bpf filesystem", dir, r.Notes)
			}
			if g, _, _ := find(r, inode(t, l)); g.Steer != nil {
				t.Errorf("--bpffs %s: steer %+v, want none", dir, g.Steer)
			}
		}
	})
}

// Run as nobody, doctor cannot open the pins of a steering group root made:
// one note, the same exit status and groups as without steering.
func TestDoctorSteerPermission(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 1}, func(t *testing.T) {
		dir := netnstest.MountBPF(t, "0755")
		l := listen(t, "127.0.0.1:0", 0)
		join(t, &steer.Config{Dir: dir}, l)
		p := netnstest.StartHelper(t, "doctor", netnstest.HelperOptions{
			Path:       netnstest.ExecutableCopy(t),
			Env:        []string{"DOCTOR_ARGS=doctor --json --bpffs " + dir},
			Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
		})
		out, err := io.ReadAll(p.Stdout)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("doctor as nobody: %v", err)
		}
		var r report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		n := steerNotes(r)
		t.Logf("notes: %q", n)
		if len(n) != 1 || !strings.Contains(n[0], steer.ErrPermission.Error()) {
			t.Errorf("notes %q, want one steering note saying %q", r.Notes, steer.ErrPermission)
		}
		if g, _, ok := find(r, inode(t, l)); !ok || g.Steer != nil {
			t.Errorf("group %+v (found %v), want the listener without a steer object", g, ok)
		}
	})
}

func onBPFFS(dir string) bool {
	for p := dir; ; p = p[:max(strings.LastIndex(p, "/"), 1)] {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if p == "/" {
			return false
		}
	}
}

// steerNotes returns the notes about steering.
func steerNotes(r report) []string {
	var out []string
	for _, n := range r.Notes {
		if strings.HasPrefix(n, "steering") {
			out = append(out, n)
		}
	}
	return out
}

// hasRow reports whether a line of table has the fields of row.
func hasRow(table, row string) bool {
	for _, line := range strings.Split(table, "\n") {
		if strings.Join(strings.Fields(line), " ") == row {
			return true
		}
	}
	return false
}

// cookie reads l's SO_COOKIE.
func cookie(t *testing.T, l *reuseport.Listener) uint64 {
	t.Helper()
	rc, err := l.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var c uint64
	var serr error
	if err := rc.Control(func(fd uintptr) { c, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_COOKIE) }); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Fatal(serr)
	}
	return c
}

// doctorTable runs doctor with args and returns the table.
func doctorTable(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	doctorMain(context.Background(), args, &out, &errOut, linuxKernel())
	if errOut.Len() > 0 {
		t.Logf("doctor stderr: %s", errOut.String())
	}
	return out.String()
}

func drain(t *testing.T, m *steer.Member, on bool) {
	t.Helper()
	if err := m.SetDraining(on); err != nil {
		t.Fatal(err)
	}
}

// join registers l in cfg's steering group; the member is closed at cleanup.
func join(t *testing.T, cfg *steer.Config, l *reuseport.Listener) *steer.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := cfg.Join(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
