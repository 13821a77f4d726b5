package steer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/internal/netnstest"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/reuseport/steer"
)

// readLine reads one line of a helper's stdout within timeout.
func readLine(tb testing.TB, p *netnstest.Proc, timeout time.Duration) string {
	tb.Helper()
	p.Stdout.SetReadDeadline(time.Now().Add(timeout))
	var b strings.Builder
	buf := make([]byte, 1)
	for {
		n, err := p.Stdout.Read(buf)
		if n == 1 && buf[0] == '\n' {
			return b.String()
		}
		b.Write(buf[:n])
		if err != nil {
			tb.Fatalf("read helper line (got %q): %v", b.String(), err)
		}
	}
}

// worker is a helper process serving one reuseport listener; the test drives
// it with lines on its stdin.
type worker struct {
	p     *netnstest.Proc
	stdin io.WriteCloser
	name  string
	slot  string // as reported at start, "-" in plain mode
	addr  string // where it listens
}

// startWorker starts a worker on addr; mode is "steer" (joins the group in
// dir) or "plain" (no program).
func startWorker(tb testing.TB, name, mode, dir, addr string) *worker {
	tb.Helper()
	r, w := io.Pipe()
	p := netnstest.StartHelper(tb, "worker", netnstest.HelperOptions{
		Env:   []string{"ZD_NAME=" + name, "ZD_MODE=" + mode, "ZD_DIR=" + dir, "ZD_ADDR=" + addr},
		Stdin: r,
	})
	tb.Cleanup(func() { w.Close() })
	wk := &worker{p: p, stdin: w, name: name}
	line := readLine(tb, p, 20*time.Second)
	if _, err := fmt.Sscanf(line, "ready %s %s", &wk.slot, &wk.addr); err != nil {
		tb.Fatalf("worker %s said %q", name, line)
	}
	return wk
}

// do sends a command and returns the worker's one-line answer.
func (w *worker) do(tb testing.TB, cmd string) string {
	tb.Helper()
	if _, err := io.WriteString(w.stdin, cmd+"\n"); err != nil {
		tb.Fatalf("worker %s: %v", w.name, err)
	}
	return readLine(tb, w.p, 20*time.Second)
}

// workerMain serves ZD_ADDR: each connection gets "<name>\n" after its first
// line and 2 ms of work. Commands on stdin: "drain" retires the listener (in
// steer mode: mark draining, accept until empty plus a grace period, close,
// leave; in plain mode: close at once), listens again and answers
// "drained <ms> <slot>"; EOF ends the process.
func workerMain() {
	s := &server{name: os.Getenv("ZD_NAME"), steer: os.Getenv("ZD_MODE") == "steer", cfg: &steer.Config{Dir: os.Getenv("ZD_DIR")}}
	if err := s.start(os.Getenv("ZD_ADDR")); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("ready", s.slot(), s.addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "drain":
			d, err := s.drain()
			if err != nil {
				fmt.Println("error", err)
				continue
			}
			fmt.Println("drained", d.Milliseconds(), s.slot())
		}
	}
	s.stop()
}

type server struct {
	name  string
	steer bool
	cfg   *steer.Config
	addr  string
	l     *reuseport.Listener
	m     *steer.Member
	wg    sync.WaitGroup
}

func (s *server) slot() string {
	if s.m == nil {
		return "-"
	}
	return fmt.Sprint(s.m.Slot())
}

func (s *server) start(addr string) error {
	c := reuseport.Config{Migration: reuseport.MigrationIgnore}
	l, err := c.Listen(context.Background(), "tcp4", addr)
	if err != nil {
		return err
	}
	s.l, s.addr = l, l.Addr().String()
	if s.steer {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if s.m, err = s.cfg.Join(ctx, l); err != nil {
			l.Close()
			return err
		}
	}
	s.wg.Add(1)
	go s.serve(l)
	return nil
}

func (s *server) serve(l *reuseport.Listener) {
	defer s.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 64)
			if _, err := c.Read(buf); err != nil {
				return
			}
			time.Sleep(2 * time.Millisecond)
			c.Write([]byte(s.name + "\n"))
		}()
	}
}

// grace covers handshakes in flight when a draining listener closes.
const grace = 20 * time.Millisecond

func (s *server) drain() (time.Duration, error) {
	start := time.Now()
	if s.steer {
		if err := s.m.SetDraining(true); err != nil {
			return 0, err
		}
		if err := s.waitEmpty(start); err != nil {
			return 0, err
		}
	}
	s.l.Close()
	d := time.Since(start)
	if s.m != nil {
		if err := s.m.Close(); err != nil {
			return 0, err
		}
	}
	return d, s.start(s.addr)
}

// waitEmpty waits (at most 5 s) until the grace period has passed and the
// accept queue is empty; the serve loop does the accepting.
func (s *server) waitEmpty(start time.Time) error {
	for time.Since(start) < 5*time.Second {
		q, err := s.l.Queue()
		if err != nil {
			return err
		}
		if q.Len == 0 && time.Since(start) >= grace {
			return nil
		}
		time.Sleep(time.Millisecond)
	}
	return errors.New("queue not empty after 5 s")
}

func (s *server) stop() {
	s.l.Close()
	if s.m != nil {
		s.m.Close()
	}
	s.wg.Wait()
}

// ask makes one request to addr and returns the answer (the worker's name) or
// the outcome of the failure.
func ask(addr string, timeout time.Duration) (string, netnstest.Outcome) {
	c, err := net.DialTimeout("tcp4", addr, timeout)
	if err != nil {
		return "", netnstest.Classify(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		return "", netnstest.Classify(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if n > 0 {
		return strings.TrimSpace(string(buf[:n])), netnstest.Answered
	}
	return "", netnstest.Classify(err)
}
