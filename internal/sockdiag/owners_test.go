//go:build linux

package sockdiag

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// helperOwners runs Listeners for the port in $PORT and Owners for the first
// listener found, and prints what they return as JSON.
func helperOwners() {
	port, _ := strconv.Atoi(os.Getenv("PORT"))
	var out struct {
		Listeners  []Listener
		Owners     map[uint64][]Process
		Unreadable []int
		Err        string
	}
	var err error
	if out.Listeners, err = Listeners(uint16(port)); err == nil && len(out.Listeners) > 0 {
		out.Owners, out.Unreadable, err = Owners([]uint64{out.Listeners[0].Inode})
	}
	if err != nil {
		out.Err = err.Error()
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

// testAsNobody checks that an unprivileged process sees root's listener in the
// dump but cannot read root's fds, and says so.
func testAsNobody(t *testing.T, port uint16, want ...Listener) {
	p := netnstest.StartHelper(t, "owners", netnstest.HelperOptions{
		Path:       netnstest.ExecutableCopy(t),
		Env:        []string{"PORT=" + strconv.Itoa(int(port))},
		Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
	})
	var out struct {
		Listeners  []Listener
		Owners     map[uint64][]Process
		Unreadable []int
		Err        string
	}
	if err := json.NewDecoder(p.Stdout).Decode(&out); err != nil {
		t.Fatalf("helper output: %v", err)
	}
	if out.Err != "" {
		t.Fatalf("helper: %s", out.Err)
	}
	slices.SortFunc(out.Listeners, byInode)
	slices.SortFunc(want, byInode)
	if !slices.Equal(out.Listeners, want) {
		t.Errorf("Listeners as nobody = %+v, want %+v", out.Listeners, want)
	}
	if len(out.Owners) != 0 {
		t.Errorf("Owners as nobody = %+v, want none visible", out.Owners)
	}
	if !slices.Contains(out.Unreadable, os.Getpid()) {
		t.Errorf("unreadable as nobody = %v, want it to contain %d", out.Unreadable, os.Getpid())
	}
}
