package handoff

import (
	"slices"
	"sync"

	"go.uber.org/zap"
)

// connPassing is an Upgrader's connection passing, in both roles: the handlers
// registered for the connections a predecessor passes us and the
// conversations on which it does (preds), and the conversation with a ready
// successor that takes ours (succ). It has its own lock; the Upgrader owns
// it, and closes it first when it is closed.
type connPassing struct {
	log   *zap.Logger
	opErr func(error) error

	mu       sync.Mutex
	handlers map[string]func(PassedConn)
	succ     *ConnSender
	preds    []*conn
	closed   bool
	stopped  bool           // stopReceiving was called: preds are closed at once
	wg       sync.WaitGroup // the goroutines receiving on preds
	handed   handed         // the connections handed to our handlers
}

// handle registers h for the connections of the listener name.
func (p *connPassing) handle(name string, h func(PassedConn)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.handlers == nil {
		p.handlers = map[string]func(PassedConn){}
	}
	p.handlers[name] = h
}

// takes returns the names of the listeners we have a handler for, sorted.
func (p *connPassing) takes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := make([]string, 0, len(p.handlers))
	for name := range p.handlers {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// successor returns the sender to the ready successor that takes
// connections, or nil.
func (p *connPassing) successor() *ConnSender {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.succ
}

// keepSuccessor keeps the conversation with a ready successor that takes
// the connections of takes, for PassConns; c is ours from now on.
func (p *connPassing) keepSuccessor(c *conn, takes []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return
	}
	p.succ = newConnSender(c, takes, p.log, p.opErr)
}

// receiveFrom receives, on its own goroutine, the connections the
// predecessor passes on pred, for the handlers registered so far, each
// accepted on the address addrs has for its listener's name; pred is ours
// from now on.
func (p *connPassing) receiveFrom(pred *conn, addrs map[string]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.stopped {
		pred.Close()
		return
	}
	handlers := make(map[string]func(PassedConn), len(p.handlers))
	for name, h := range p.handlers {
		handlers[name] = h
	}
	p.preds = append(p.preds, pred)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		receiveConns(pred, &receiver{handlers: handlers, addrs: addrs, handed: &p.handed, idle: connWait, log: p.log})
	}()
}

// stopReceiving ends the conversations with predecessors and waits for
// their goroutines (each gives what it acknowledged to its handlers first).
func (p *connPassing) stopReceiving() {
	p.mu.Lock()
	p.stopped = true
	preds := p.preds
	p.preds = nil
	p.mu.Unlock()
	for _, c := range preds {
		c.Close()
	}
	p.wg.Wait()
}

// close ends the conversation with the successor (it has every connection
// it acked) and those with predecessors, and waits for the receiving
// goroutines. Later conversations given to it are closed at once.
func (p *connPassing) close() {
	p.mu.Lock()
	p.closed = true
	succ, preds := p.succ, p.preds
	p.succ, p.preds = nil, nil
	p.mu.Unlock()
	if succ != nil {
		succ.Close()
	}
	for _, c := range preds {
		c.Close()
	}
	p.wg.Wait()
}
