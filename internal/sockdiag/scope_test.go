package sockdiag

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// TestYounger: our parent started before us and is dropped; we tie with
// ourselves and a child started after us counts; a PID that does not exist
// is dropped.
func TestYounger(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run=^$")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	got, err := Younger([]int{os.Getppid(), os.Getpid(), pid, 1 << 30}, os.Getpid())
	child.Process.Kill()
	child.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{os.Getpid(), pid}; !slices.Equal(got, want) {
		t.Errorf("Younger = %v, want %v (parent %d dropped)", got, want, os.Getppid())
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
