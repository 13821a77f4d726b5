package drain_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	netnstest.RegisterHelper("worker", workerMain)
	netnstest.RegisterHelper("hold", holdMain)
	netnstest.HelperMain()
	benchInNamespace()
	os.Exit(m.Run())
}

// listenTCP listens on a plain IPPROTO_TCP socket (not Go's default MPTCP).
func listenTCP(t testing.TB, addr string) *net.TCPListener {
	t.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	return l.(*net.TCPListener)
}

// oneSocket listens on 127.0.0.1 and returns the listener and a second
// listener on a duplicate of its fd: two servers on one socket, as a
// predecessor and its successor after a handoff.
func oneSocket(t testing.TB) (*net.TCPListener, net.Listener) {
	t.Helper()
	l1 := listenTCP(t, "127.0.0.1:0")
	f, err := l1.File()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return l1, l2
}

// request is an HTTP/1.1 request that asks for the connection to be closed.
func request(path string) []byte {
	return []byte("GET " + path + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
}

// named answers 200 with an X-Server header naming the server.
func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Server", name)
		io.WriteString(w, name+"\n")
	})
}

// servedBy counts HTTP 200 replies per X-Server value; other replies under "".
func servedBy(cs *netnstest.Clients) map[string]int {
	out := map[string]int{}
	for _, c := range cs.List {
		rep := string(c.Reply)
		name := ""
		if strings.HasPrefix(rep, "HTTP/1.1 200") {
			if i := strings.Index(rep, "X-Server: "); i >= 0 {
				name = strings.TrimSpace(strings.SplitN(rep[i+len("X-Server: "):], "\r\n", 2)[0])
			}
		}
		out[name]++
	}
	return out
}

// gate stalls an http.Server's accept loop: the first connection's
// ConnContext blocks until open is closed, so later connections stay queued.
type gate struct {
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) connContext(ctx context.Context, _ net.Conn) context.Context {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		<-g.open
	}
	return ctx
}

// stall starts the stall: it dials one connection whose request then waits in
// the accept loop, and returns it.
func (g *gate) stall(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(request("/stall")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("accept loop did not reach the gate")
	}
	return c
}

// shutdownAsync runs ds.Shutdown, bounded by 20 s, in a goroutine; an error
// fails t. The report comes on the channel.
func shutdownAsync(t *testing.T, ds *drain.Server) <-chan *drain.Report {
	reps := make(chan *drain.Report, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rep, err := ds.Shutdown(ctx)
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
		reps <- rep
	}()
	return reps
}

// handedConn returns the two ends of a loopback TCP connection: client,
// and c as ServeConn takes it (accepted from a listener without MPTCP,
// which the drain refuses). Both are closed when the test ends.
func handedConn(t *testing.T) (client net.Conn, c *net.TCPConn) {
	t.Helper()
	ln := listenTCP(t, "127.0.0.1:0")
	defer ln.Close()
	client, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if c, err = ln.AcceptTCP(); err != nil {
		client.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	return client, c
}

// serve runs hs.Serve(l) in a goroutine and returns a func that waits for it.
func serve(t *testing.T, serveFn func() error) func() error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- serveFn() }()
	return func() error {
		select {
		case err := <-errc:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("Serve did not return")
			return nil
		}
	}
}

// readResponse reads one response from c within d.
func readResponse(c net.Conn, d time.Duration) (*http.Response, string, error) {
	c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// benchInNamespace re-runs a benchmark invocation in a fresh network
// namespace (lo up), so benchmark traffic never leaves it. Only as root.
func benchInNamespace() {
	const env = "ZERODROP_BENCH_NETNS"
	bench := false
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.bench=") && a != "-test.bench=" {
			bench = true
		}
	}
	if !bench || os.Geteuid() != 0 {
		return
	}
	if os.Getenv(env) != "" {
		if err := loUp(); err != nil {
			fmt.Fprintln(os.Stderr, "bring up lo:", err)
			os.Exit(1)
		}
		return
	}
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmark namespace:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
