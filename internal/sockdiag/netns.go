package sockdiag

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// NetNS returns the inode of the calling thread's network namespace
// (/proc/thread-self/ns/net), for display and for pin paths.
//
// It is the number in the "net:[N]" link, the same for every thread and
// process in the namespace. Needs no privilege; Linux 3.17.
func NetNS() (uint64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return 0, fmt.Errorf("sockdiag: netns: %w", os.NewSyscallError("stat", err))
	}
	return st.Ino, nil
}
