//go:build linux

package sockdiag

import (
	"cmp"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("owners", helperOwners)
	netnstest.HelperMain()
	os.Exit(m.Run())
}

// sock is a listening socket made by listen.
type sock struct {
	fd      int
	addr    netip.AddrPort
	backlog uint32
}

// listen opens a raw TCP socket with SO_REUSEPORT, binds it to addr and
// listens with backlog; the fd is closed at cleanup.
func listen(t *testing.T, addr netip.AddrPort, backlog int, device string) sock {
	t.Helper()
	family := unix.AF_INET6
	if addr.Addr().Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
	if err != nil {
		t.Fatal(os.NewSyscallError("socket", err))
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(os.NewSyscallError("setsockopt SO_REUSEPORT", err))
	}
	if device != "" {
		if err := unix.BindToDevice(fd, device); err != nil {
			t.Fatal(os.NewSyscallError("setsockopt SO_BINDTODEVICE", err))
		}
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		t.Fatal(os.NewSyscallError("bind", err))
	}
	if err := unix.Listen(fd, backlog); err != nil {
		t.Fatal(os.NewSyscallError("listen", err))
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(os.NewSyscallError("getsockname", err))
	}
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		addr = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		addr = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	return sock{fd: fd, addr: addr, backlog: uint32(backlog)}
}

func sockaddr(a netip.AddrPort) unix.Sockaddr {
	if a.Addr().Is4() {
		return &unix.SockaddrInet4{Addr: a.Addr().As4(), Port: int(a.Port())}
	}
	return &unix.SockaddrInet6{Addr: a.Addr().As16(), Port: int(a.Port())}
}

// connect opens n client connections to addr that nobody accepts; they are
// closed at cleanup.
func connect(t *testing.T, addr netip.AddrPort, n int) {
	t.Helper()
	for range n {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if err != nil {
			t.Fatal(os.NewSyscallError("socket", err))
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Connect(fd, sockaddr(addr)); err != nil {
			t.Fatal(os.NewSyscallError("connect", err))
		}
	}
}

// want is the Listener the kernel should report for s, from the fd itself.
func (s sock) want(t *testing.T, ifindex uint32) Listener {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(s.fd, &st); err != nil {
		t.Fatal(os.NewSyscallError("fstat", err))
	}
	cookie, err := unix.GetsockoptUint64(s.fd, unix.SOL_SOCKET, unix.SO_COOKIE)
	if err != nil {
		t.Fatal(os.NewSyscallError("getsockopt SO_COOKIE", err))
	}
	family := unix.AF_INET6
	if s.addr.Addr().Is4() {
		family = unix.AF_INET
	}
	return Listener{Addr: s.addr, Family: family, Inode: st.Ino, UID: 0, Backlog: s.backlog,
		Cookie: cookie, Interface: ifindex}
}

// listeners calls Listeners and sorts the result by inode.
func listeners(t *testing.T, port uint16) []Listener {
	t.Helper()
	ls, err := Listeners(port)
	if err != nil {
		t.Fatalf("Listeners(%d): %v", port, err)
	}
	slices.SortFunc(ls, byInode)
	return ls
}

func byInode(a, b Listener) int { return cmp.Compare(a.Inode, b.Inode) }

func check(t *testing.T, port uint16, want ...Listener) {
	t.Helper()
	slices.SortFunc(want, byInode)
	if got := listeners(t, port); !slices.Equal(got, want) {
		t.Errorf("Listeners(%d) =\n%+v\nwant\n%+v", port, got, want)
	}
}

func TestListeners(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		v4 := listen(t, netip.MustParseAddrPort("127.0.0.1:0"), 7, "")
		port := v4.addr.Port()
		v6a := listen(t, netip.AddrPortFrom(netip.IPv6Loopback(), port), 5, "")
		v6b := listen(t, netip.AddrPortFrom(netip.IPv6Loopback(), port), 9, "")
		other := listen(t, netip.MustParseAddrPort("127.0.0.1:0"), 4, "lo")
		connect(t, v4.addr, 3)

		w4 := v4.want(t, 0)
		w4.Queue = 3
		// The server side of a handshake completes when the client's ACK is
		// processed, which may be just after connect returns.
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			if slices.Contains(listeners(t, port), w4) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		w6a, w6b, wOther := v6a.want(t, 0), v6b.want(t, 0), other.want(t, uint32(lo.Index))
		t.Run("port", func(t *testing.T) { check(t, port, w4, w6a, w6b) })
		t.Run("other port", func(t *testing.T) { check(t, other.addr.Port(), wOther) })
		t.Run("all", func(t *testing.T) { check(t, 0, w4, w6a, w6b, wOther) })
		t.Run("unused port", func(t *testing.T) { check(t, 1) })

		t.Run("owners", func(t *testing.T) {
			inodes := []uint64{w4.Inode, w6a.Inode, w6b.Inode, wOther.Inode, 1 << 62}
			owners, unreadable, err := Owners(inodes)
			if err != nil {
				t.Fatal(err)
			}
			if len(unreadable) > 0 {
				t.Logf("unreadable as root: %v", unreadable)
			}
			comm := filepath.Base(os.Args[0])
			comm = comm[:min(len(comm), 15)]
			self := []Process{{PID: os.Getpid(), Comm: comm, UID: 0}}
			for _, ino := range inodes[:4] {
				if got := owners[ino]; !slices.Equal(got, self) {
					t.Errorf("owners of %d = %+v, want %+v", ino, got, self)
				}
			}
			if len(owners) != 4 {
				t.Errorf("owners = %+v, want 4 inodes", owners)
			}
		})

		t.Run("mptcp", testMPTCP)
		t.Run("as nobody", func(t *testing.T) { testAsNobody(t, port, w4, w6a, w6b) })
		t.Run("thread namespace", func(t *testing.T) { testThreadNamespace(t) })
	})
}

// testThreadNamespace checks that Listeners and NetNS follow the calling
// thread's namespace: a thread that unshared its own sees an empty one.
func testThreadNamespace(t *testing.T) {
	here, err := NetNS()
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ns  uint64
		ls  []Listener
		err error
	}
	ch := make(chan result)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var r result
		if r.err = unix.Unshare(unix.CLONE_NEWNET); r.err == nil {
			if r.ns, r.err = NetNS(); r.err == nil {
				r.ls, r.err = Listeners(0)
			}
		}
		ch <- r
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.ns == here || len(r.ls) != 0 {
		t.Errorf("in a new namespace: NetNS = %d (here %d), Listeners = %+v, want another namespace, none", r.ns, here, r.ls)
	}
}

func TestNetNS(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	got, err := NetNS()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		t.Fatal(err)
	}
	link, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if got != st.Ino || link != "net:["+strconv.FormatUint(got, 10)+"]" {
		t.Errorf("NetNS() = %d, want %d (%s)", got, st.Ino, link)
	}
}

// testMPTCP pins what the dump shows of Go's default listener, an MPTCP socket
// on Go 1.24 and later: its TCP subflow listener, under the fd's inode.
func testMPTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	var proto int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if serr = unix.Fstat(int(fd), &st); serr == nil {
			proto, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PROTOCOL)
		}
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	ls := listeners(t, port)
	if len(ls) != 1 || ls[0].Inode != st.Ino || ls[0].Addr != netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port) {
		t.Errorf("SO_PROTOCOL %d listener: Listeners = %+v, want one with inode %d", proto, ls, st.Ino)
	}
}

// TestSelfPID: Owners names the caller by the PID /proc gives it, and so does
// SelfPID: os.Getpid() here, another number in a PID namespace of its own that
// kept its parent's /proc (where os.Getpid() is 1).
func TestSelfPID(t *testing.T) {
	check := func(t *testing.T) (self int) {
		self, err := SelfPID()
		if err != nil {
			t.Fatal(err)
		}
		l := listen(t, netip.MustParseAddrPort("127.0.0.1:0"), 16, "")
		var st unix.Stat_t
		if err := unix.Fstat(l.fd, &st); err != nil {
			t.Fatal(err)
		}
		owners, _, err := Owners([]uint64{st.Ino})
		if err != nil {
			t.Fatal(err)
		}
		if ps := owners[st.Ino]; len(ps) != 1 || ps[0].PID != self {
			t.Errorf("Owners = %+v, want one process, SelfPID %d (os.Getpid %d)", ps, self, os.Getpid())
		}
		return self
	}
	t.Run("here", func(t *testing.T) {
		if self := check(t); self != os.Getpid() {
			t.Errorf("SelfPID = %d, want os.Getpid() %d", self, os.Getpid())
		}
	})
	t.Run("pid-namespace", func(t *testing.T) {
		netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep, PIDNamespace: true}, func(t *testing.T) {
			if self := check(t); os.Getpid() != 1 || self == 1 {
				t.Errorf("os.Getpid() = %d, SelfPID = %d; want 1 and the PID of the parent's /proc", os.Getpid(), self)
			}
		})
	})
}
