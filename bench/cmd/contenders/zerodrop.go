package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/zerodrop/zerodrop/bench/internal/worker"
	"github.com/zerodrop/zerodrop/internal/sysdbox"
	"github.com/zerodrop/zerodrop/reuseport"
)

// zerodropSpecs are the zerodrop strategies.
func zerodropSpecs() []spec {
	return []spec{
		{name: "zd-drain", migrateReq: 1,
			about: "zerodrop: 4 reuseport workers rolled, tcp_migrate_req=1, drain.Server.Shutdown",
			make:  func() contender { return &pool{mode: "drain", n: 4} }},
		{name: "zd-handoff",
			about: "zerodrop: one process upgraded by handoff (fds over a unix socket), then drain.Server.Shutdown",
			make:  func() contender { return &handoffContender{} }},
		{name: "zd-tickets",
			about: "zd-handoff whose TLS session-ticket keys go to the successor with the listener (handoff.Config.TicketKeys): clients resume their sessions across restarts",
			make:  func() contender { return &handoffContender{env: []string{worker.EnvTickets + "=1"}} }},
		{name: "zd-tls13",
			about: "zd-tickets whose idle TLS 1.3 keep-alive connections go to the successor with their session (drain.Server.TLSHandOver, zerodrop.Options.TLSHandoff): clients neither reconnect nor handshake",
			make: func() contender {
				return &handoffContender{env: []string{worker.EnvTickets + "=1", worker.EnvTLSHandOver + "=1"}}
			}},
		{name: "zd-systemd",
			about: "zerodrop: systemd fd-store restart (handoff/systemd; the harness plays systemd): stop, start with the stored listener",
			make:  func() contender { return &systemdContender{} }},
		{name: "zd-systemd-pid1",
			about: "zerodrop: systemctl restart of a Type=notify service under the real systemd (PID 1 of a sandbox), listener in its fd store",
			make:  func() contender { return &pid1Contender{} },
			check: sysdbox.CheckTools, noTLS: "no TLS mode: the unit does not pass the certificate"},
		{name: "zd-steer", bpf: true,
			about: "zerodrop: 4 reuseport workers in a reuseport/steer eBPF group, tcp_migrate_req=0, drain.Server steering away",
			make:  func() contender { return &pool{mode: "steer", n: 4} }},
		{name: "zd-cpu",
			about: "zerodrop: 4 reuseport workers with SO_INCOMING_CPU (2 per CPU), tcp_migrate_req=0, drain.Server stepping out first",
			make:  func() contender { return &pool{mode: "cpu", n: 4, slotEnv: cpuSlot} },
			check: checkCPU},
	}
}

// cpuSlot gives the workers of slot i the CPU i modulo the online CPUs: a
// pool of 4 covers every CPU of a 2- or 4-CPU machine, and a slot's
// successor has its predecessor's CPU.
func cpuSlot(i int) []string {
	cpus, err := reuseport.OnlineCPUs()
	if err != nil || len(cpus) == 0 {
		return []string{worker.EnvCPU + "=0"}
	}
	return []string{worker.EnvCPU + "=" + strconv.Itoa(cpus[i%len(cpus)])}
}

// checkCPU: the pool covers every CPU only with as many workers as CPUs, and
// the pick prefers a CPU's member only since Linux 6.1.
func checkCPU() error {
	if err := reuseport.CPUPreference(); err != nil {
		return err
	}
	cpus, err := reuseport.OnlineCPUs()
	if err != nil {
		return err
	}
	if len(cpus) > 4 || 4%len(cpus) != 0 {
		return fmt.Errorf("%d online CPUs: 4 workers do not cover each CPU equally", len(cpus))
	}
	return nil
}

// handoffContender is one process upgraded with package handoff: a restart
// starts the successor, which takes the listener over and calls Ready; the
// predecessor then drains and exits.
type handoffContender struct {
	env []string // the workers' extra environment
	run *runEnv
	cur *proc
}

func (c *handoffContender) start(ctx context.Context, env *runEnv) (err error) {
	c.run = env
	c.cur, err = env.startWorker(ctx, "handoff", "", c.env)
	return err
}

func (c *handoffContender) restart(ctx context.Context, mark func(string)) error {
	next, err := c.run.startWorker(ctx, "handoff", "", c.env)
	if err != nil {
		return err
	}
	mark("handoff") // next is Ready: the predecessor is stopping
	old := c.cur
	c.cur = next
	return old.wait(ctx)
}

func (c *handoffContender) stop(ctx context.Context) error { return c.cur.stop(ctx) }
