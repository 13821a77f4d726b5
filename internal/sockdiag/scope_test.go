package sockdiag

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestSuspects builds a process tree and asks which of its processes could
// hold a socket of S's without S having sent it: P runs S, then (later) a
// sibling C1 and a grandchild G; then the test, outside P's tree, starts C2.
// C1 and G descend from S's parent and are younger: suspects. P (S's parent),
// the test's parent (older, elsewhere) and C2 (younger, but not in P's tree:
// only a unix socket could give it S's socket) are not; nor is a PID that
// does not exist.
func TestSuspects(t *testing.T) {
	p := exec.Command("/bin/sh", "-c", `sleep 60 & echo $!; sleep 0.05; sleep 60 & echo $!; (sleep 60 & echo $!; wait) & wait`)
	p.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := p.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL) // P's process group: P and all it started
		p.Wait()
	}()
	var pids []int
	sc := bufio.NewScanner(out)
	for len(pids) < 3 && sc.Scan() {
		pid, err := strconv.Atoi(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if len(pids) < 3 {
		t.Fatalf("P printed %v: %v", pids, sc.Err())
	}
	s, c1, g := pids[0], pids[1], pids[2]
	time.Sleep(50 * time.Millisecond) // a clock tick or more after S
	c2 := exec.Command("sleep", "60")
	if err := c2.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { c2.Process.Kill(); c2.Wait() }()

	got, err := Suspects([]int{os.Getppid(), p.Process.Pid, c1, g, c2.Process.Pid, 1 << 30}, s)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{c1, g}; !slices.Equal(got, want) {
		t.Errorf("Suspects = %v, want %v (S %d, P %d, C2 %d)", got, want, s, p.Process.Pid, c2.Process.Pid)
	}
}

// TestSuspectsParentIsInit: for a process whose parent is PID 1, every
// younger process may have inherited from it: the walk stops nowhere.
func TestSuspectsParentIsInit(t *testing.T) {
	if got, err := Suspects([]int{os.Getpid()}, 1); err != nil || !slices.Equal(got, []int{os.Getpid()}) {
		t.Errorf("Suspects(us, 1) = %v, %v; want us", got, err)
	}
}

// TestHiddenHere: this process's /proc (the initial PID namespace's, no
// hidepid) hides nothing.
func TestHiddenHere(t *testing.T) {
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil || link != initPIDNS {
		t.Skipf("not in the initial PID namespace (%s, %v)", link, err)
	}
	if why, err := Hidden(); why != "" || err != nil {
		t.Errorf("Hidden = %q, %v; want nothing hidden", why, err)
	}
}
