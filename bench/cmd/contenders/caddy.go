package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"text/template"
)

// caddySpecs are the Caddy contenders: Debian's caddy answering with the
// respond directive, reloaded with caddy reload through its admin API on a
// unix socket.
func caddySpecs() []spec {
	check := installed("caddy", "caddy")
	return []spec{
		{name: "caddy", check: check, h3: true,
			about: "Caddy, respond directive; caddy reload (admin API on a unix socket): a configuration reload inside one process, which keeps its listeners; Caddy has no binary upgrade, a new binary is a stop and a start",
			make:  func() contender { return &caddy{} }},
	}
}

// caddyConf is a Caddyfile for one generation.
type caddyConf struct {
	Dir, Addr, Gen string
	// Cert and Key, if set, make the site HTTPS (HTTP/2 by ALPN, and
	// HTTP/3 on UDP, Caddy's defaults).
	Cert, Key string
}

var caddyTemplate = template.Must(template.New("Caddyfile").Parse(`{
	admin unix/{{.Dir}}/caddy-admin.sock
	auto_https off
	storage file_system {{.Dir}}/caddy-data
	grace_period 30s
}
{{if .Cert}}https{{else}}http{{end}}://{{.Addr}} {
	bind 127.0.0.1
{{- if .Cert}}
	tls {{.Cert}} {{.Key}}
{{- end}}
	header X-Generation {{.Gen}}
	respond "ok" 200
}
`))

// render writes the Caddyfile to path.
func (c caddyConf) render(path string) error {
	return renderFile(caddyTemplate, c, path)
}

// caddy is one caddy run process with a Caddyfile in the run's directory. A
// restart rewrites the Caddyfile with the next generation and runs caddy
// reload, and counts as done when a request from outside is answered by the
// new generation.
type caddy struct {
	env  *runEnv
	proc *proc
}

func (c *caddy) conf() string { return filepath.Join(c.env.dir, "Caddyfile") }

// write renders the Caddyfile of the next generation and returns it.
func (c *caddy) write() (string, error) {
	gen := c.env.nextGen()
	cf := caddyConf{Dir: c.env.dir, Addr: c.env.addr, Gen: gen, Cert: c.env.certFile, Key: c.env.keyFile}
	return gen, cf.render(c.conf())
}

// command is caddy with args, its state and config directories in the run's.
func (c *caddy) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "caddy", args...)
	cmd.Env = append(os.Environ(), "HOME="+c.env.dir, "XDG_DATA_HOME="+c.env.dir, "XDG_CONFIG_HOME="+c.env.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (c *caddy) start(ctx context.Context, env *runEnv) error {
	c.env = env
	gen, err := c.write()
	if err != nil {
		return err
	}
	cmd := c.command(context.Background(), "run", "--config", c.conf(), "--adapter", "caddyfile")
	cmd.Stdout, cmd.Stderr = env.stderr, env.stderr
	if c.proc, err = startProc(cmd); err != nil {
		return fmt.Errorf("start caddy: %w", err)
	}
	if _, err := awaitGen(ctx, env, c.proc.exited, func() error { return c.proc.err }, gen); err != nil {
		c.proc.kill()
		return fmt.Errorf("caddy: %w", err)
	}
	return nil
}

func (c *caddy) restart(ctx context.Context, mark func(string)) error {
	gen, err := c.write()
	if err != nil {
		return err
	}
	mark("reload")
	cmd := c.command(ctx, "reload", "--config", c.conf(), "--adapter", "caddyfile")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("caddy reload: %w: %s", err, out)
	}
	if _, err := awaitGen(ctx, c.env, c.proc.exited, func() error { return c.proc.err }, gen); err != nil {
		return fmt.Errorf("caddy: %w", err)
	}
	return nil
}

func (c *caddy) stop(ctx context.Context) error {
	if c.proc == nil {
		return nil
	}
	err := c.proc.stop(ctx)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // caddy may exit non-zero on SIGTERM
	}
	return err
}
