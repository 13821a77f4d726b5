package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
)

// nginxSpecs are the nginx contenders: Debian's nginx, reloaded with
// nginx -s reload, serving a "return 200" location.
func nginxSpecs() []spec {
	check := installed("nginx", "nginx-light")
	return []spec{
		{name: "nginx", check: check, about: "nginx, 4 workers, nginx -s reload (a configuration reload: the binary stays; its binary upgrade is SIGUSR2, not measured)",
			make: func() contender { return &nginx{workers: [2]int{4, 4}} }},
		{name: "nginx-reuseport", check: check, about: "the same with listen ... reuseport",
			make: func() contender { return &nginx{workers: [2]int{4, 4}, reuseport: true} }},
		{name: "nginx-reuseport-4to2", check: check,
			about: "reuseport, worker_processes alternating 4 and 2 (every other reload closes 2 sockets)",
			make:  func() contender { return &nginx{workers: [2]int{4, 2}, reuseport: true} }},
	}
}

// nginxConf is an nginx configuration for one generation.
type nginxConf struct {
	Dir, Addr, Gen string
	Workers        int
	Reuseport      bool
	// Cert and Key, if set, make the server HTTPS, with HTTP/2 offered by
	// ALPN.
	Cert, Key string
}

var nginxTemplate = template.Must(template.New("nginx.conf").Parse(`daemon off;
master_process on;
worker_processes {{.Workers}};
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path {{.Dir}}/client_body;
	proxy_temp_path {{.Dir}}/proxy;
	fastcgi_temp_path {{.Dir}}/fastcgi;
	uwsgi_temp_path {{.Dir}}/uwsgi;
	scgi_temp_path {{.Dir}}/scgi;
	server {
		listen {{.Addr}}{{if .Cert}} ssl http2{{end}} backlog=4096{{if .Reuseport}} reuseport{{end}};
{{- if .Cert}}
		ssl_certificate {{.Cert}};
		ssl_certificate_key {{.Key}};
		ssl_protocols TLSv1.2 TLSv1.3;
{{- end}}
		location / {
			add_header X-Generation {{.Gen}} always;
			return 200 "ok\n";
		}
	}
}
`))

// render writes the configuration to path.
func (c nginxConf) render(path string) error {
	return renderFile(nginxTemplate, c, path)
}

// nginx is an nginx master with its own prefix in the run's directory. A
// restart rewrites the configuration with the next generation (and the next
// worker count), runs nginx -s reload, and waits until a request from
// outside is answered by the new generation: the command's exit status says
// nothing about what serves.
type nginx struct {
	workers   [2]int // worker_processes, alternating
	reuseport bool
	env       *runEnv
	master    *proc
	reloads   int
}

func (c *nginx) conf() string { return filepath.Join(c.env.dir, "nginx.conf") }

// args are nginx's prefix and configuration flags.
func (c *nginx) args(more ...string) []string {
	return append([]string{"-p", c.env.dir + "/", "-c", c.conf(), "-e", filepath.Join(c.env.dir, "error.log")}, more...)
}

// write renders the configuration of the next generation and returns it.
func (c *nginx) write() (string, error) {
	gen := c.env.nextGen()
	cf := nginxConf{Dir: c.env.dir, Addr: c.env.addr, Gen: gen,
		Workers: c.workers[c.reloads%2], Reuseport: c.reuseport, Cert: c.env.certFile, Key: c.env.keyFile}
	return gen, cf.render(c.conf())
}

func (c *nginx) start(ctx context.Context, env *runEnv) error {
	c.env = env
	gen, err := c.write()
	if err != nil {
		return err
	}
	cmd := exec.Command("nginx", c.args()...)
	cmd.Stdout, cmd.Stderr = env.stderr, env.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if c.master, err = startProc(cmd); err != nil {
		return fmt.Errorf("start nginx: %w", err)
	}
	if err := c.awaitGen(ctx, gen); err != nil {
		c.master.kill()
		return err
	}
	return nil
}

func (c *nginx) restart(ctx context.Context, mark func(string)) error {
	c.reloads++
	gen, err := c.write()
	if err != nil {
		return err
	}
	mark("reload")
	cmd := exec.CommandContext(ctx, "nginx", c.args("-s", "reload")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nginx -s reload: %w: %s", err, out)
	}
	return c.awaitGen(ctx, gen)
}

// awaitGen waits until nginx answers with generation gen.
func (c *nginx) awaitGen(ctx context.Context, gen string) error {
	_, err := awaitGen(ctx, c.env, c.master.exited, func() error { return c.master.err }, gen)
	if err != nil {
		return fmt.Errorf("nginx: %w", err)
	}
	return nil
}

func (c *nginx) stop(ctx context.Context) error {
	if c.master == nil {
		return nil
	}
	err := c.master.stop(ctx)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		err = nil // nginx exits non-zero on SIGTERM
	}
	return err
}

// installed is a spec's check for a peer run from the binary bin of the
// Debian package pkg: an error, naming the package to install, when bin is
// not on PATH.
func installed(bin, pkg string) func() error {
	return func() error {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install %s)", bin, pkg)
		}
		return nil
	}
}

// renderFile writes t executed with data to path: a peer's configuration.
func renderFile(t *template.Template, data any, path string) error {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
