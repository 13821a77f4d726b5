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
	"github.com/zerodrop/zerodrop/handoff"
	"github.com/zerodrop/zerodrop/handoff/systemd"
	"github.com/zerodrop/zerodrop/reuseport"
	"github.com/zerodrop/zerodrop/stats"
	"github.com/zerodrop/zerodrop/stats/promstats"
	"golang.org/x/sys/unix"
)

// config is the command line.
type config struct {
	args               []string // the whole command line, for a successor
	addr, name, ignore string
	socket             string // the handoff socket; "" means no reload
	cert, key          string // PEM files: serve HTTPS; "" means plain HTTP
	generation         int
	store              bool
	grace              time.Duration
}

func parse(args []string) (*config, error) {
	c := &config{args: args}
	fs := flag.NewFlagSet("systemd", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on when not socket-activated")
	fs.StringVar(&c.name, "name", "http", "FileDescriptorName= of the listener (and FDNAME= in the fd store)")
	fs.StringVar(&c.ignore, "ignore-options", "", "comma-separated options CheckOptions leaves out (e.g. SO_REUSEPORT)")
	fs.IntVar(&c.generation, "generation", 1, "generation number reported in STATUS= and by GET / (with -socket: of the first process; each reload adds one)")
	fs.BoolVar(&c.store, "store", false, "push the listener into systemd's fd store (for a service without a .socket unit)")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "bound on the drain at stop")
	fs.StringVar(&c.socket, "socket", "", "handoff socket (its directory must be 0700 or 0755, ours): SIGHUP starts a successor that takes the listener over")
	fs.StringVar(&c.cert, "cert", "", "PEM certificate file: serve HTTPS (HTTP/2 and HTTP/1.1 by ALPN) with drain.Server.ServeTLS")
	fs.StringVar(&c.key, "key", "", "PEM key file of -cert")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if (c.cert == "") != (c.key == "") {
		return c, errors.New("-cert and -key go together")
	}
	return c, nil
}

func main() {
	c, err := parse(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err = run(ctx, c, hup, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "systemd example:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then drains. With -socket, each value from hup
// starts a successor, and once it serves this process drains and returns.
func run(ctx context.Context, c *config, hup <-chan os.Signal, out io.Writer) error {
	hub := new(stats.Hub) // served on /metrics
	u, err := newUpgrader(ctx, c, hub)
	if err != nil {
		return err
	}
	if u != nil {
		defer u.Close()
	}
	l, how, err := listen(ctx, c, u)
	if err != nil {
		return err
	}
	gen := c.generation - 1 + int(generationOf(u))
	hub.SetGeneration(uint64(gen))
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
	srv := &drain.Server{HTTP: &http.Server{ReadHeaderTimeout: 10 * time.Second}, OnReport: hub.DrainHook(c.name)}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promstats.Handler(hub, promstats.Options{Groups: []promstats.Group{{Listener: c.name, Addr: l.Addr().String()}}}))
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "generation %d pid %d inode %d\n", gen, os.Getpid(), ino)
	})
	mux.Handle("/ready", srv.Ready())
	srv.HTTP.Handler = mux
	served := make(chan error, 1)
	go func() {
		if c.cert != "" {
			served <- srv.ServeTLS(l, c.cert, c.key)
			return
		}
		served <- srv.Serve(l)
	}()

	status := fmt.Sprintf("generation %d serving %s (%s, inode %d)", gen, l.Addr(), how, ino)
	fmt.Fprintln(out, status)
	if err := announce(n, u, status); err != nil {
		return errors.Join(err, drainServer(srv, c.grace, out))
	}
	w, err := watchdog(ctx, n, u)
	if err != nil {
		return errors.Join(err, shutdown(n, srv, gen, c.grace, out))
	}
	defer w.Stop()
	return wait(ctx, c, &generation{n: n, u: u, srv: srv, w: w, gen: gen, status: status}, hup, served, out)
}

// listen takes the listener from the predecessor (with -socket), from
// systemd, or creates it when not activated.
func listen(ctx context.Context, c *config, u *handoff.Upgrader) (net.Listener, string, error) {
	act, err := systemd.Activated()
	if err != nil {
		return nil, "", err
	}
	if u != nil {
		return listenHandoff(ctx, c, u, act)
	}
	cfg := &reuseport.Config{}
	if act == nil {
		l, err := cfg.Listen(ctx, "tcp", c.addr)
		return l, "listened", err
	}
	defer act.Close() // fds we did not take (none, with the example units)
	l, err := act.Listener(ctx, c.name, "tcp", "", cfg, ignoreOptions(c)...)
	return l, "from systemd", err
}

func ignoreOptions(c *config) []string {
	if c.ignore == "" {
		return nil
	}
	return strings.Split(c.ignore, ",")
}

// shutdown tells systemd and drains the server.
func shutdown(n *systemd.Notifier, srv *drain.Server, gen int, grace time.Duration, out io.Writer) error {
	errNotify := n.Stopping(fmt.Sprintf("generation %d draining", gen))
	return errors.Join(errNotify, drainServer(srv, grace, out))
}

// drainServer drains srv within grace and prints its report (JSON on stderr).
func drainServer(srv *drain.Server, grace time.Duration, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	report, err := srv.Shutdown(ctx)
	if report != nil {
		json.NewEncoder(os.Stderr).Encode(report)
		fmt.Fprintf(out, "stopped: %s\n", report.Method)
	}
	return err
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
