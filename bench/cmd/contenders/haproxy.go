package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// haproxySpecs are the HAProxy contenders: Debian's haproxy in master-worker
// mode, answering from the configuration (http-request return, no backend),
// reloaded seamlessly by the master's SIGUSR2.
func haproxySpecs() []spec {
	check := installed("haproxy", "haproxy")
	return []spec{
		{name: "haproxy", check: check,
			about: "HAProxy master-worker (threads = CPUs), http-request return; reload: SIGUSR2 to the master, stats socket with expose-fd listeners, the master re-executes with -x (seamless reload); a configuration reload of the same binary, which is also how HAProxy upgrades its binary",
			make:  func() contender { return &haproxy{} }},
	}
}

// haproxyConf is a HAProxy configuration for one generation.
type haproxyConf struct {
	Dir, Addr, Gen string
	// PEM, if set, is the certificate and key in one file: the frontend
	// then serves HTTPS, with HTTP/2 offered by ALPN.
	PEM string
}

var haproxyTemplate = template.Must(template.New("haproxy.cfg").Parse(`global
	master-worker
	stats socket {{.Dir}}/haproxy-stats.sock mode 600 level admin expose-fd listeners
	pidfile {{.Dir}}/haproxy.pid
	maxconn 8000
	hard-stop-after 30s
defaults
	mode http
	timeout connect 5s
	timeout client 30s
	timeout server 30s
	timeout http-keep-alive 30s
frontend bench
	bind {{.Addr}} backlog 4096{{if .PEM}} ssl crt {{.PEM}} alpn h2,http/1.1{{end}}
	http-request return status 200 content-type text/plain string "ok" hdr X-Generation {{.Gen}} hdr X-Worker "%pid"
`))

// render writes the configuration to path.
func (c haproxyConf) render(path string) error {
	return renderFile(haproxyTemplate, c, path)
}

// haproxy is a HAProxy master started in the foreground (-W -db) with its
// own configuration in the run's directory. A restart rewrites the
// configuration with the next generation and sends SIGUSR2 to the master,
// which re-executes itself, passes the listeners to the new worker (-x, from
// the socket that exposes them) and soft-stops the old one; it counts as
// done when a request from outside is answered by the new generation from a
// worker PID other than the previous one.
type haproxy struct {
	env    *runEnv
	master *proc
	pem    string
	worker string // X-Worker of the generation serving
	// loaded receives the outcome of each (re)load the master logs on its
	// stderr: true for "Loading success", false for "Loading failure";
	// reloading receives its "Reloading HAProxy", logged when it acts on a
	// SIGUSR2. On this loaded VM a SIGUSR2 sent soon after a reload was
	// sometimes never acted upon (2.6.12): a restart sends it again when
	// the master has not said "Reloading" within haproxyAck, and counts it.
	loaded    chan bool
	reloading chan struct{}
	resent    int
}

// haproxyAck is how long a restart waits for the master's "Reloading
// HAProxy" before it sends SIGUSR2 again.
const haproxyAck = time.Second

func (c *haproxy) conf() string { return filepath.Join(c.env.dir, "haproxy.cfg") }

// write renders the configuration of the next generation and returns it.
func (c *haproxy) write() (string, error) {
	gen := c.env.nextGen()
	return gen, haproxyConf{Dir: c.env.dir, Addr: c.env.addr, Gen: gen, PEM: c.pem}.render(c.conf())
}

func (c *haproxy) start(ctx context.Context, env *runEnv) error {
	c.env = env
	if env.certFile != "" {
		pem, err := concatFiles(filepath.Join(env.dir, "haproxy.pem"), env.certFile, env.keyFile)
		if err != nil {
			return err
		}
		c.pem = pem
	}
	gen, err := c.write()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command("haproxy", "-W", "-db", "-f", c.conf())
	cmd.Stdout, cmd.Stderr = env.stderr, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.master, err = startProc(cmd)
	w.Close()
	if err != nil {
		r.Close()
		return fmt.Errorf("start haproxy: %w", err)
	}
	c.loaded, c.reloading = make(chan bool, 16), make(chan struct{}, 16)
	go watchLoads(r, env.stderr, c.loaded, c.reloading)
	err = c.awaitLoaded(ctx)
	var got served
	if err == nil {
		got, err = awaitGen(ctx, env, c.master.exited, func() error { return c.master.err }, gen)
	}
	if err != nil {
		c.master.kill()
		return fmt.Errorf("haproxy: %w", err)
	}
	c.worker = got.worker
	return nil
}

func (c *haproxy) restart(ctx context.Context, mark func(string)) error {
	gen, err := c.write()
	if err != nil {
		return err
	}
	mark("reload")
	if err := c.signalReload(ctx); err != nil {
		return fmt.Errorf("haproxy: reload: %w", err)
	}
	if err := c.awaitLoaded(ctx); err != nil {
		return fmt.Errorf("haproxy: reload: %w", err)
	}
	got, err := awaitGen(ctx, c.env, c.master.exited, func() error { return c.master.err }, gen)
	if err != nil {
		return fmt.Errorf("haproxy: %w", err)
	}
	if got.worker == "" || got.worker == c.worker {
		return fmt.Errorf("haproxy: generation %s answered by worker %q, the previous one was %q", gen, got.worker, c.worker)
	}
	c.worker = got.worker
	return nil
}

func (c *haproxy) stop(ctx context.Context) error {
	if c.master == nil {
		return nil
	}
	err := c.master.stop(ctx)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // the master exits with its worker's status, 143 after SIGTERM
	}
	return err
}

// signalReload sends SIGUSR2 to the master until it logs "Reloading
// HAProxy", for readyTimeout at most.
func (c *haproxy) signalReload(ctx context.Context) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		if err := c.master.signal(syscall.SIGUSR2); err != nil {
			return err
		}
		t := time.NewTimer(haproxyAck)
		select {
		case <-c.reloading:
			t.Stop()
			return nil
		case <-c.master.exited:
			t.Stop()
			return fmt.Errorf("master exited: %v", c.master.err)
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no Reloading from the master after %v", readyTimeout)
		}
		c.resent++
		fmt.Fprintf(c.env.stderr, "contenders: haproxy master silent %v after SIGUSR2; sent again (%d so far)\n", haproxyAck, c.resent)
	}
}

// awaitLoaded waits for the master's next "Loading success", bounded by
// readyTimeout.
func (c *haproxy) awaitLoaded(ctx context.Context) error {
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case ok, open := <-c.loaded:
		switch {
		case !open:
			return errors.New("master closed its stderr")
		case !ok:
			return errors.New("the master logged Loading failure")
		}
		return nil
	case <-c.master.exited:
		return fmt.Errorf("master exited: %v", c.master.err)
	case <-t.C:
		return fmt.Errorf("no Loading success from the master after %v", readyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watchLoads copies the master's stderr r to out, and sends the outcome of
// every load it logs to loaded and every reload it begins to reloading,
// until every writer has closed r.
func watchLoads(r *os.File, out io.Writer, loaded chan<- bool, reloading chan<- struct{}) {
	defer r.Close()
	defer close(loaded)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(out, line)
		var ok bool
		switch {
		case strings.Contains(line, "Reloading HAProxy"):
			select {
			case reloading <- struct{}{}:
			default:
			}
			continue
		case strings.Contains(line, "Loading success"):
			ok = true
		case strings.Contains(line, "Loading failure"):
		default:
			continue
		}
		select {
		case loaded <- ok:
		default:
		}
	}
}

// concatFiles writes the contents of files, one after the other, to path
// and returns path.
func concatFiles(path string, files ...string) (string, error) {
	var b []byte
	for _, f := range files {
		d, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		b = append(b, d...)
	}
	return path, os.WriteFile(path, b, 0o600)
}
