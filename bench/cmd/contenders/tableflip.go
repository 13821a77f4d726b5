package main

import "context"

// tableflipContender is one process upgraded in place by tableflip: a restart
// sends SIGHUP and waits for the new process to be ready and the old one to
// exit.
type tableflipContender struct {
	env *runEnv
	cur *proc
}

func (c *tableflipContender) start(ctx context.Context, env *runEnv) error {
	c.env = env
	p, err := env.startWorker(ctx, "tableflip", "", nil)
	c.cur = p
	return err
}

func (c *tableflipContender) restart(ctx context.Context, mark func(string)) error {
	old := c.cur
	mark("upgrade")
	if err := old.signal(sigHUP); err != nil {
		return err
	}
	pid, err := old.nextReady(ctx)
	if err != nil {
		return err
	}
	if err := old.wait(ctx); err != nil {
		return err
	}
	// The new process is a child of the old one; with the old one gone, it is
	// this namespace's init's (ours) to wait for.
	next, err := old.adopt(pid)
	if err != nil {
		return err
	}
	c.cur = next
	return nil
}

func (c *tableflipContender) stop(ctx context.Context) error { return c.cur.stop(ctx) }
