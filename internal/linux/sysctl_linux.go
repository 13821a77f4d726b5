package linux

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// MigrateReq is the sysctl that lets a closing SO_REUSEPORT listener hand its
// accept queue to a sibling (Linux 5.14+).
const MigrateReq = "net.ipv4.tcp_migrate_req"

// sysctlPath maps "net.ipv4.tcp_migrate_req" to its /proc/sys file.
func sysctlPath(name string) string {
	return "/proc/sys/" + strings.ReplaceAll(name, ".", "/")
}

// ReadSysctl returns the value of a sysctl, trimmed, as seen from the calling
// thread's namespaces. A sysctl the kernel does not have gives an error for which
// errors.Is(err, fs.ErrNotExist) holds.
func ReadSysctl(name string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b, err := os.ReadFile(sysctlPath(name))
	if err != nil {
		return "", fmt.Errorf("read sysctl %s: %w", name, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteSysctl sets a sysctl in the calling thread's namespaces. Without
// CAP_NET_ADMIN over the namespace the error wraps fs.ErrPermission (or EROFS
// when /proc/sys is mounted read-only).
func WriteSysctl(name, value string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.OpenFile(sysctlPath(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return fmt.Errorf("write sysctl %s: %w", name, err)
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write sysctl %s: %w", name, err)
	}
	return nil
}
