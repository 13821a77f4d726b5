package netnstest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/linux"
)

// SocketInode is the inode of the socket c, as in "socket:[N]" fd links.
func SocketInode(tb testing.TB, c syscall.Conn) uint64 {
	tb.Helper()
	var st syscall.Stat_t
	if err := linux.Control(c, func(fd int) error { return syscall.Fstat(fd, &st) }); err != nil {
		tb.Fatal(err)
	}
	return st.Ino
}

// SocketFDs counts the fds in fdDir (a process's /proc/PID/fd) that are the
// socket ino; 0 once the process has exited.
func SocketFDs(fdDir string, ino uint64) int {
	link := fmt.Sprintf("socket:[%d]", ino)
	ents, _ := os.ReadDir(fdDir) // none once it exited
	n := 0
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(fdDir, e.Name())); target == link {
			n++
		}
	}
	return n
}

// WaitFewerFDs waits up to 10 s until the process of fdDir holds fewer than
// n fds of the socket ino (for a listening socket others hold too: its
// listener stopped), and fails tb if it does not.
func WaitFewerFDs(tb testing.TB, fdDir string, ino uint64, n int) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if SocketFDs(fdDir, ino) < n {
			return
		}
	}
	tb.Fatalf("%s still holds %d fds of socket:[%d] 10 s on", fdDir, n, ino)
}

// LateGet is a client of the TLS trap: on c, connected earlier, it does the
// TLS handshake with cfg now, sends GET / and returns the body of the
// answer, which must be complete, 200 and close the connection.
func LateGet(c net.Conn, cfg *tls.Config) (string, error) {
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: late\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return "", err
	case resp.StatusCode != http.StatusOK || !resp.Close:
		return "", fmt.Errorf("%s, close=%v: %q", resp.Status, resp.Close, b)
	}
	return string(b), nil
}
