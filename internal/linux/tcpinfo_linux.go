package linux

import (
	"os"

	"golang.org/x/sys/unix"
)

// ListenQueue reads TCP_INFO from a listening socket. For a listener the kernel
// reports the accept-queue length in tcpi_unacked and the effective backlog
// (after the clamp to net.core.somaxconn) in tcpi_sacked.
func ListenQueue(fd int) (queue, backlog uint32, err error) {
	info, err := TCPInfo(fd)
	if err != nil {
		return 0, 0, os.NewSyscallError("getsockopt TCP_INFO", err)
	}
	if info.State != unix.BPF_TCP_LISTEN {
		return 0, 0, os.NewSyscallError("getsockopt TCP_INFO", unix.EINVAL)
	}
	return info.Unacked, info.Sacked, nil
}
