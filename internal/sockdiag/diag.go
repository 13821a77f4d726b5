package sockdiag

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

const (
	recvTimeout = 10 * time.Second // a dump that stalls this long is an error
	bufSize     = 32 << 10         // first receive buffer; grown to fit larger datagrams
	maxBatches  = 1 << 20          // datagrams per dump before giving up on NLMSG_DONE
	maxEINTR    = 100              // retries of one interrupted syscall
	maxAttempts = 5                // dumps retried while the kernel flags NLM_F_DUMP_INTR
)

// Listeners dumps the TCP listeners of the calling thread's network namespace.
// port 0 means all ports; otherwise only that local port.
// The netlink socket is created with the calling goroutine locked to its OS
// thread (runtime.LockOSThread) so the namespace is the thread's.
//
// IPv4 listeners come first, then IPv6 ones, each in the kernel's order. A
// dual-stack socket bound to [::] is reported once, as AF_INET6. An MPTCP
// listener (Go's default since 1.24) shows up as its TCP subflow listener,
// indistinguishable from a plain TCP one: Inode is the fd's, but Cookie is the
// subflow's, not the fd's SO_COOKIE. No capability is needed; Linux 3.3.
func Listeners(port uint16) ([]Listener, error) {
	fd, err := open()
	if err != nil {
		return nil, fmt.Errorf("sockdiag: dump: %w", err)
	}
	defer unix.Close(fd)
	var all []Listener
	var seq uint32
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		ls, err := dump(fd, family, port, listenStates, &seq)
		if err != nil {
			return nil, fmt.Errorf("sockdiag: dump %s: %w", familyName(family), err)
		}
		all = append(all, ls...)
	}
	return all, nil
}

// open creates the NETLINK_SOCK_DIAG socket in the calling thread's network
// namespace. The caller owns the returned fd.
func open() (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	tv := unix.NsecToTimeval(recvTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt SO_RCVTIMEO", err)
	}
	return fd, nil
}

// dump runs one SOCK_DIAG_BY_FAMILY dump, again if the kernel reports that the
// listener tables changed during it (NLM_F_DUMP_INTR).
func dump(fd int, family uint8, port uint16, states uint32, seq *uint32) ([]Listener, error) {
	for range maxAttempts {
		*seq++
		if err := send(fd, requestStates(family, port, states, *seq)); err != nil {
			return nil, err
		}
		ls, intr, err := receive(fd, family, port, states, *seq)
		if err != nil || !intr {
			return ls, err
		}
	}
	return nil, fmt.Errorf("%d dumps in a row interrupted (NLM_F_DUMP_INTR): %w", maxAttempts, unix.EAGAIN)
}

func send(fd int, req []byte) error {
	to := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
	for range maxEINTR {
		err := unix.Sendto(fd, req, 0, to)
		if err != unix.EINTR {
			return os.NewSyscallError("sendto", err) // nil if err is nil
		}
	}
	return os.NewSyscallError("sendto", unix.EINTR)
}

// receive reads datagrams until the dump with sequence number seq is done.
func receive(fd int, family uint8, port uint16, states uint32, seq uint32) (ls []Listener, intr bool, err error) {
	buf := make([]byte, bufSize)
	for range maxBatches {
		// Peek at the real size first, so that no datagram is ever truncated.
		n, kernel, err := recv(fd, buf, unix.MSG_PEEK|unix.MSG_TRUNC)
		if err != nil {
			return nil, false, err
		}
		if n > len(buf) {
			buf = make([]byte, (n+os.Getpagesize()-1)&^(os.Getpagesize()-1))
		}
		if n, _, err = recv(fd, buf, 0); err != nil {
			return nil, false, err
		}
		if !kernel {
			continue // unicast from another process to our port ID: not an answer
		}
		var r result
		if ls, r, err = parse(buf[:n], seq, family, port, states, ls); err != nil {
			return nil, false, err
		}
		intr = intr || r.intr
		if r.done {
			return ls, intr, nil
		}
	}
	return nil, false, fmt.Errorf("no NLMSG_DONE after %d datagrams", maxBatches)
}

// recv is recvfrom retried on EINTR; kernel reports whether the kernel sent the
// datagram (netlink port ID 0).
func recv(fd int, buf []byte, flags int) (n int, kernel bool, err error) {
	for range maxEINTR {
		n, from, err := unix.Recvfrom(fd, buf, flags)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, false, os.NewSyscallError("recvfrom", err)
		}
		sa, ok := from.(*unix.SockaddrNetlink)
		return n, ok && sa.Pid == 0, nil
	}
	return 0, false, os.NewSyscallError("recvfrom", unix.EINTR)
}

func familyName(family uint8) string {
	switch family {
	case unix.AF_INET:
		return "inet"
	case unix.AF_INET6:
		return "inet6"
	}
	return fmt.Sprintf("family %d", family)
}

// errMalformed is wrapped by every error about a reply the parser cannot read.
var errMalformed = errors.New("malformed netlink message")
