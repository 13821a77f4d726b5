package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"golang.org/x/sys/unix"
)

// config is the command line.
type config struct {
	addr, name, ignore string
	generation         int
	store              bool
	grace              time.Duration
}

func parse(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("systemd", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on when not socket-activated")
	fs.StringVar(&c.name, "name", "http", "FileDescriptorName= of the listener (and FDNAME= in the fd store)")
	fs.StringVar(&c.ignore, "ignore-options", "", "comma-separated options CheckOptions leaves out (e.g. SO_REUSEPORT)")
	fs.IntVar(&c.generation, "generation", 1, "generation number reported in STATUS= and by GET /")
	fs.BoolVar(&c.store, "store", false, "push the listener into systemd's fd store (for a service without a .socket unit)")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "bound on the drain at stop")
	return c, fs.Parse(args)
}

func main() {
	c, err := parse(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "systemd example:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then drains.
func run(ctx context.Context, c *config, out io.Writer) error {
	l, how, err := listen(ctx, c)
	if err != nil {
		return err
	}
	n := systemd.FromEnv() // nil outside systemd: notifications are no-ops
	if c.store {
		if err := n.Store(c.name, l.(syscall.Conn)); err != nil {
			l.Close()
			return err
		}
	}
	ino, err := inode(l)
	if err != nil {
		l.Close()
		return err
	}
	srv := &drain.Server{HTTP: &http.Server{ReadHeaderTimeout: 10 * time.Second}}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "generation %d pid %d inode %d\n", c.generation, os.Getpid(), ino)
	})
	mux.Handle("/ready", srv.Ready())
	srv.HTTP.Handler = mux
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()

	status := fmt.Sprintf("generation %d serving %s (%s, inode %d)", c.generation, l.Addr(), how, ino)
	fmt.Fprintln(out, status)
	if err := n.Ready(status); err != nil {
		return errors.Join(err, shutdown(n, srv, c, out))
	}
	w, err := n.StartWatchdog(ctx)
	if err != nil {
		return errors.Join(err, shutdown(n, srv, c, out))
	}
	defer w.Stop()
	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	}
	return shutdown(n, srv, c, out)
}

// listen takes the listener from systemd, or creates it when not activated.
func listen(ctx context.Context, c *config) (net.Listener, string, error) {
	act, err := systemd.Activated()
	if err != nil {
		return nil, "", err
	}
	cfg := &reuseport.Config{}
	if act == nil {
		l, err := cfg.Listen(ctx, "tcp", c.addr)
		return l, "listened", err
	}
	defer act.Close() // fds we did not take (none, with the example units)
	var ignore []string
	if c.ignore != "" {
		ignore = strings.Split(c.ignore, ",")
	}
	l, err := act.Listener(ctx, c.name, "tcp", "", cfg, ignore...)
	return l, "from systemd", err
}

// shutdown tells systemd and drains the server.
func shutdown(n *systemd.Notifier, srv *drain.Server, c *config, out io.Writer) error {
	errNotify := n.Stopping(fmt.Sprintf("generation %d draining", c.generation))
	ctx, cancel := context.WithTimeout(context.Background(), c.grace)
	defer cancel()
	report, err := srv.Shutdown(ctx)
	if report != nil {
		json.NewEncoder(os.Stderr).Encode(report)
		fmt.Fprintf(out, "stopped: %s\n", report.Method)
	}
	return errors.Join(errNotify, err)
}

func inode(l net.Listener) (uint64, error) {
	rc, err := l.(syscall.Conn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	return st.Ino, os.NewSyscallError("fstat", serr)
}
