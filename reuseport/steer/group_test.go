package steer_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// The first member creates and pins the group under <dir>/<netns>/<ip>-<port>;
// the second opens the pins and takes the next slot; the last Close removes
// the pins.
func TestJoinPinsAndSlots(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		dir := netnstest.MountBPF(t, "0755")
		cfg := &steer.Config{Dir: dir}
		a := listen(t, "127.0.0.1:0", reuseport.Options{})
		b := listen(t, a.Addr().String(), reuseport.Options{})
		ma, err := cfg.Join(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		mb, err := cfg.Join(context.Background(), b)
		if err != nil {
			t.Fatal(err)
		}
		ns, _ := os.Readlink("/proc/self/ns/net") // net:[inode]
		inode := strings.TrimSuffix(strings.TrimPrefix(ns, "net:["), "]")
		want := filepath.Join(dir, inode, strings.NewReplacer(".", "_", ":", "-").Replace(a.Addr().String()))
		if ma.Group().Dir() != want {
			t.Fatalf("group dir %s, want %s", ma.Group().Dir(), want)
		}
		for _, p := range []string{"prog", "sockets", "slots", "counters", "cookies", "config"} {
			if _, err := os.Stat(filepath.Join(want, p)); err != nil {
				t.Fatalf("pin %s: %v", p, err)
			}
		}
		if ma.Slot() != 0 || mb.Slot() != 1 {
			t.Fatalf("slots %d, %d, want 0, 1", ma.Slot(), mb.Slot())
		}
		slots, err := ma.Group().Slots()
		if err != nil {
			t.Fatal(err)
		}
		if len(slots) != steer.DefaultSlots {
			t.Fatalf("%d slots, want %d", len(slots), steer.DefaultSlots)
		}
		for i, s := range slots[:2] {
			if s.State != steer.Live || s.Weight != steer.DefaultWeight || s.Cookie == 0 || s.Class != steer.ClassOf(a.Digest()) {
				t.Fatalf("slot %d = %+v, want live, weight %d, a cookie, class %d", i, s, steer.DefaultWeight, steer.ClassOf(a.Digest()))
			}
		}
		if slots[2].State != steer.Free {
			t.Fatalf("slot 2 = %+v, want free", slots[2])
		}
		a.Close()
		if err := ma.Close(); err != nil {
			t.Fatal(err)
		}
		if err := ma.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, err := os.Stat(filepath.Join(want, "prog")); err != nil {
			t.Fatalf("pins gone while a member remains: %v", err)
		}
		b.Close()
		if err := mb.Close(); err != nil {
			t.Fatal(err)
		}
		if left := pins(t, dir); len(left) != 0 {
			t.Fatalf("pins left after the last member: %v", left)
		}
		// The largest table still passes the verifier.
		big := join(t, &steer.Config{Dir: dir, Slots: steer.MaxSlots}, listen(t, "127.0.0.1:0", reuseport.Options{}))
		if big.Group().Len() != steer.MaxSlots {
			t.Fatalf("%d slots, want %d", big.Group().Len(), steer.MaxSlots)
		}
	})
}

// Bad input gives typed errors, leaves no pins, and (checked by Run) no fds.
func TestErrors(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		ctx := context.Background()
		l := listen(t, "127.0.0.1:0", reuseport.Options{})

		// No bpffs: a plain directory.
		plain := t.TempDir()
		_, err := (&steer.Config{Dir: plain}).Join(ctx, l)
		if !errors.Is(err, steer.ErrNoBPFFS) {
			t.Fatalf("join on a plain directory: %v, want ErrNoBPFFS", err)
		}
		isOp(t, err, "steer join")
		if left := pins(t, plain); len(left) != 0 {
			t.Fatalf("left behind: %v", left)
		}

		dir := netnstest.MountBPF(t, "0755")
		cfg := &steer.Config{Dir: dir, Slots: 2}

		// MPTCP listener.
		mp, err := (&reuseport.Config{MPTCP: true, Migration: reuseport.MigrationIgnore}).Listen(ctx, "tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer mp.Close()
		_, err = cfg.Join(ctx, mp)
		if !errors.Is(err, reuseport.ErrNotSupported) || !errors.Is(err, syscall.EOPNOTSUPP) {
			t.Fatalf("join MPTCP: %v, want ErrNotSupported and EOPNOTSUPP", err)
		}
		isOp(t, err, "steer join")

		// Out of range configuration.
		if _, err := (&steer.Config{Dir: dir, Slots: steer.MaxSlots + 1}).Join(ctx, l); !errors.Is(err, steer.ErrBadSlot) {
			t.Fatalf("Slots %d: %v, want ErrBadSlot", steer.MaxSlots+1, err)
		}
		if left := pins(t, dir); len(left) != 0 {
			t.Fatalf("left behind: %v", left)
		}

		// No group yet.
		if _, err := cfg.Open(ctx, l.Addr().String()); !errors.Is(err, steer.ErrNoGroup) {
			t.Fatalf("open before any member: %v, want ErrNoGroup", err)
		}

		// Slot table full; a slot whose socket closed is freed by the next Join.
		m0 := join(t, cfg, l)
		if _, err := cfg.Join(ctx, l); !errors.Is(err, syscall.EBUSY) {
			t.Fatalf("joining the same listener twice: %v, want EBUSY", err)
		}
		if i, err := m0.Group().SlotOf(l); err != nil || i != 0 {
			t.Fatalf("after the failed second join, SlotOf = %d, %v; want 0", i, err)
		}
		l1 := listen(t, l.Addr().String(), reuseport.Options{})
		join(t, cfg, l1)
		l2 := listen(t, l.Addr().String(), reuseport.Options{})
		_, err = cfg.Join(ctx, l2)
		if !errors.Is(err, steer.ErrSlotsFull) {
			t.Fatalf("third join into 2 slots: %v, want ErrSlotsFull", err)
		}
		isOp(t, err, "steer join")
		l1.Close()
		m2 := join(t, cfg, l2)
		if m2.Slot() != 1 {
			t.Fatalf("slot %d, want 1 (freed by the closed socket)", m2.Slot())
		}

		// Setters.
		g := m0.Group()
		for name, err := range map[string]error{
			"weight":   g.SetWeight(0, steer.MaxWeight+1),
			"slot -1":  g.SetDraining(-1, true),
			"slot 2":   g.SetLoad(2, 1),
			"mismatch": g.SetMismatch(7),
		} {
			if !errors.Is(err, steer.ErrBadSlot) {
				t.Fatalf("%s: %v, want ErrBadSlot", name, err)
			}
		}
		other := listen(t, "127.0.0.1:0", reuseport.Options{})
		if err := g.MarkDraining(other); !errors.Is(err, steer.ErrNotMember) {
			t.Fatalf("MarkDraining(non-member): %v, want ErrNotMember", err)
		}
		if err := g.MarkDraining(l2); err != nil {
			t.Fatal(err)
		}
		s, _ := g.Slots()
		if s[1].State != steer.Draining || s[0].State != steer.Live {
			t.Fatalf("states %v %v, want live draining", s[0].State, s[1].State)
		}
		m0.Close()
		if err := g.SetDraining(0, true); !errors.Is(err, os.ErrClosed) && !strings.Contains(fmt.Sprint(err), "closed") {
			t.Fatalf("SetDraining after Close: %v", err)
		}
	})
}

// A process without CAP_BPF gets an error matching ErrPermission and
// os.ErrPermission, whether it creates a group (the kernel refuses bpf()) or
// opens one that root pinned, and leaves no pins.
func TestNoCapability(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		dir := netnstest.MountBPF(t, "1777") // anyone may create directories
		exe := netnstest.ExecutableCopy(t)
		check := func(op, addr, why string) {
			t.Helper()
			out := nobody(t, exe, dir, op, addr)
			t.Logf("as uid 65534, %s: %s", op, out)
			if !strings.HasPrefix(out, "permission=true os=true op=true ") || !strings.Contains(out, why) {
				t.Fatalf("helper said %q", out)
			}
		}
		check("join", "127.0.0.1:0", "operation not permitted") // bpf(BPF_MAP_CREATE)
		if left := pins(t, dir); len(left) != 0 {
			t.Fatalf("left behind: %v", left)
		}
		l := listen(t, "127.0.0.1:0", reuseport.Options{})
		join(t, &steer.Config{Dir: dir}, l)
		check("open", l.Addr().String(), "permission denied") // root's pins and directories
	})
}

// nobody runs the as-nobody helper under uid 65534 and returns its line.
func nobody(t *testing.T, exe, dir, op, addr string) string {
	t.Helper()
	p := netnstest.StartHelper(t, "as-nobody", netnstest.HelperOptions{
		Path:       exe,
		Env:        []string{"ZD_DIR=" + dir, "ZD_OP=" + op, "ZD_ADDR=" + addr},
		Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := readLine(t, p, 20*time.Second)
	if err := p.Wait(ctx); err != nil {
		t.Fatalf("helper: %v (said %q)", err, out)
	}
	return out
}

// asNobody joins a new listener's group (ZD_OP=join) or opens the group of
// ZD_ADDR (open), and prints how the error matched.
func asNobody() {
	ctx := context.Background()
	cfg := &steer.Config{Dir: os.Getenv("ZD_DIR")}
	var err error
	switch os.Getenv("ZD_OP") {
	case "join":
		l, lerr := (&reuseport.Config{Migration: reuseport.MigrationIgnore}).Listen(ctx, "tcp4", os.Getenv("ZD_ADDR"))
		if lerr != nil {
			fmt.Println("listen:", lerr)
			return
		}
		defer l.Close()
		_, err = cfg.Join(ctx, l)
	case "open":
		_, err = cfg.Open(ctx, os.Getenv("ZD_ADDR"))
	case "joinquic":
		pc, lerr := reuseport.ListenPacket(ctx, "udp4", os.Getenv("ZD_ADDR"))
		if lerr != nil {
			fmt.Println("listen:", lerr)
			return
		}
		defer pc.Close()
		_, err = cfg.JoinQUIC(ctx, pc, 1, steer.QUIC{CIDLen: 16})
	}
	var oe *net.OpError
	fmt.Printf("permission=%v os=%v op=%v %v\n", errors.Is(err, steer.ErrPermission), errors.Is(err, os.ErrPermission), errors.As(err, &oe), err)
}

// Pins of another layout (another version of the package) are refused with
// ErrIncompatible, not misread.
func TestIncompatiblePins(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: 0}, func(t *testing.T) {
		cfg := &steer.Config{Dir: netnstest.MountBPF(t, "0755")}
		a := listen(t, "127.0.0.1:0", reuseport.Options{})
		m := join(t, cfg, a)
		pin := filepath.Join(m.Group().Dir(), "slots")
		if err := os.Remove(pin); err != nil {
			t.Fatal(err)
		}
		bad, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: steer.DefaultSlots})
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		if err := bad.Pin(pin); err != nil {
			t.Fatal(err)
		}
		b := listen(t, a.Addr().String(), reuseport.Options{})
		_, err = cfg.Join(context.Background(), b)
		if !errors.Is(err, steer.ErrIncompatible) || !errors.Is(err, ebpf.ErrMapIncompatible) {
			t.Fatalf("join with a foreign slots map: %v, want ErrIncompatible", err)
		}
		isOp(t, err, "steer join")
	})
}
