package handoff

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"go.uber.org/zap"
)

// Ready declares that this process serves: its predecessor, if any, is told to
// stop (its Exit channel closes) and answers done; then this process serves
// the handoff socket for its own successor, and writes the PID file. Inherited
// sockets that no Listen call claimed are closed. Call it once every listener
// is obtained (and, ideally, accepting). An error that matches
// ErrReadyIncomplete came after the predecessor was told to stop: this
// process serves alone now and must go on serving. Any other error left the
// predecessor serving: this process never served for the service, and
// should close what it inherited (a drain releases it) and exit.
func (u *Upgrader) Ready() error {
	u.mu.Lock()
	if u.closed || u.ready {
		u.mu.Unlock()
		if u.ready {
			return u.opError(errors.New("ready: called twice"))
		}
		return u.opError(fmt.Errorf("ready: %w", ErrClosed))
	}
	u.ready = true
	pred, hln := u.inh.release()
	u.mu.Unlock()
	u.table.CloseUnclaimed()
	// The PID file is written before the predecessor hears anything, so
	// that a failure leaves it serving; it is renamed into place at the end.
	var pidTmp string
	if u.cfg.PIDFile != "" {
		var err error
		if pidTmp, err = preparePIDFile(u.cfg.PIDFile); err != nil {
			if pred != nil {
				pred.Close()
			}
			if hln != nil {
				hln.Close() // our reference; the predecessor serves it
			}
			return u.opError(fmt.Errorf("ready: %w", err))
		}
	}
	s := newServer(u.serverConfig())
	if hln != nil {
		return u.readyInherited(s, pred, hln, pidTmp)
	}
	// The first generation, or a predecessor that does not pass its handoff
	// socket (an older release of this package): bind our own.
	var tmp string
	var err error
	if !abstract(u.cfg.Path) || pred == nil {
		if s.ln, tmp, err = listenHandoff(u.cfg.Path); err != nil {
			if pred != nil {
				pred.Close()
			}
			removeTemp(pidTmp)
			return u.opError(fmt.Errorf("ready: %w", err))
		}
	}
	told := false
	if pred != nil {
		var done bool
		told, done, err = u.signal(pred)
		u.afterSignal(pred, done)
		if err == nil && s.ln == nil {
			ctx, cancel := context.WithTimeout(context.Background(), u.cfg.Timeout)
			s.ln, err = listenAbstract(ctx, u.cfg.Path, u.cfg.Timeout)
			cancel()
		}
	}
	if err == nil && !abstract(u.cfg.Path) {
		s.ino, err = publish(tmp, u.cfg.Path)
	}
	if err != nil && told {
		err = fmt.Errorf("%w: %w", ErrReadyIncomplete, err)
	}
	if err != nil {
		if s.ln != nil {
			s.ln.Close()
			os.Remove(tmp)
		}
		removeTemp(pidTmp)
		return u.opError(fmt.Errorf("ready: %w", err))
	}
	return u.serve(s, pidTmp, told)
}

// removeTemp removes a temporary file we created, if any.
func removeTemp(name string) {
	if name != "" {
		os.Remove(name)
	}
}

// readyInherited serves the handoff socket the predecessor passed us: the
// name stays bound and the file (same inode) stays in place throughout, so a
// successor never finds the path refusing while a generation is alive.
// Connections that arrive after the predecessor stopped accepting wait in
// the socket's queue until serve. On error the predecessor keeps serving the
// socket; we close only our reference.
func (u *Upgrader) readyInherited(s *server, pred *conn, ln *net.UnixListener, pidTmp string) error {
	s.ln = ln
	var err error
	if !abstract(u.cfg.Path) {
		s.ino, err = adoptPath(u.cfg.Path, u.cfg.AllowUIDs)
	}
	told, done := false, false
	if err == nil {
		told, done, err = u.signal(pred)
	}
	u.afterSignal(pred, done)
	if err != nil && told {
		err = fmt.Errorf("%w: %w", ErrReadyIncomplete, err)
	}
	if err != nil {
		ln.Close()
		removeTemp(pidTmp)
		return u.opError(fmt.Errorf("ready: %w", err))
	}
	return u.serve(s, pidTmp, true)
}

// takesList is what the ready frame says of the connections we take: the
// listeners we have a handler for, if the predecessor speaks version 2.
func (u *Upgrader) takesList() []string {
	if u.inh.version < 2 {
		return nil
	}
	return u.pass.takes()
}

// signal sends ready to the predecessor (told: it was sent, so the
// predecessor stops) and waits for done (gotDone: it came).
func (u *Upgrader) signal(pred *conn) (told, gotDone bool, err error) {
	start := time.Now()
	if err := pred.send(&frame{Type: typeReady, Generation: u.inh.gen, Takes: u.takesList()}, nil); err != nil {
		return false, false, err
	}
	f, _, err := pred.recv(0)
	if err == nil {
		err = expect(f, typeDone)
	}
	if err != nil && predecessorGone(err) {
		// It read ready (it hung up only after), so it stops, or it died.
		u.log.Warn("predecessor hung up without done; serving anyway", zap.Error(err))
		return true, false, nil
	}
	if err != nil {
		return true, false, fmt.Errorf("waiting for done: %w", err)
	}
	u.log.Info("predecessor stopped", zap.String("event", "handoff.predecessor_stopped"), zap.Uint64("generation", u.inh.gen), zap.Duration("took", time.Since(start)))
	return true, true, nil
}

// afterSignal ends the conversation with the predecessor, or, when it was
// told we take connections and answered done, keeps it to receive them.
func (u *Upgrader) afterSignal(pred *conn, gotDone bool) {
	if !gotDone || len(u.takesList()) == 0 {
		pred.Close()
		return
	}
	u.pass.receiveFrom(pred, u.listenerAddrs())
}

// serve starts the handoff server and renames the PID file into place; told
// says the predecessor was told to stop (its errors are ErrReadyIncomplete).
func (u *Upgrader) serve(s *server, pidTmp string, told bool) error {
	incomplete := func(err error) error {
		if told {
			return fmt.Errorf("%w: %w", ErrReadyIncomplete, err)
		}
		return err
	}
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		s.ln.Close()
		unpublish(s.cfg.path, s.ino)
		removeTemp(pidTmp)
		return u.opError(fmt.Errorf("ready: %w", incomplete(ErrClosed)))
	}
	u.srv = s
	s.wg.Add(1)
	go s.serve()
	u.mu.Unlock()
	u.log.Info("serving handoff socket", zap.String("event", "handoff.serving"), zap.Uint64("generation", u.inh.gen))
	if pidTmp != "" {
		if err := commitPIDFile(pidTmp, u.cfg.PIDFile); err != nil {
			return u.opError(incomplete(err))
		}
	}
	return nil
}

// serverConfig is what our handoff server is given: our settings, the
// registry's snapshot as its offer, and successorReady.
func (u *Upgrader) serverConfig() serverConfig {
	return serverConfig{path: u.cfg.Path, gen: u.inh.gen, timeout: u.cfg.Timeout, readyTimeout: u.cfg.ReadyTimeout, allowUIDs: u.cfg.AllowUIDs,
		onHandoff: u.cfg.OnHandoff, log: u.log, offer: u.table.Offer, onReady: u.successorReady, tickets: u.cfg.TicketKeys}
}

// successorReady is told by our server that a successor is ready: its
// conversation is kept for PassConns if it takes connections (before Exit,
// so that PassConns works as soon as Exit is closed), then Exit is closed.
func (u *Upgrader) successorReady(successor *conn, takes []string) {
	if successor != nil {
		u.pass.keepSuccessor(successor, takes)
	}
	u.exitOne.Do(func() { close(u.exit) })
}
