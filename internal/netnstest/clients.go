package netnstest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Outcome classifies what happened to one client.
type Outcome int

// The outcomes, in the order Tally prints them.
const (
	Answered Outcome = iota // received at least one byte
	Reset                   // ECONNRESET or EPIPE before any byte
	EOF                     // orderly close before any byte
	Refused                 // ECONNREFUSED at connect
	Timeout                 // no answer before the deadline
	Other                   // any other error
)

var outcomeNames = [...]string{"answered", "reset", "eof", "refused", "timeout", "other"}

func (o Outcome) String() string { return outcomeNames[o] }

// Classify maps an error from a dial or a read to an Outcome.
func Classify(err error) Outcome {
	var ne net.Error
	switch {
	case err == nil:
		return Answered
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return Reset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return EOF
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Timeout
	}
	return Other
}

// Client is one connection made by Queue.
type Client struct {
	Conn    net.Conn // nil if the dial failed
	Sent    []byte
	Reply   []byte
	Outcome Outcome
	Err     error
}

// ClientOptions configures Queue. The zero value sends "client N\n".
type ClientOptions struct {
	// SourcePort, if non-zero, makes client i connect from port SourcePort+i.
	SourcePort int
	// Payload returns the bytes client i sends right after connecting.
	Payload func(i int) []byte
	// DialTimeout bounds each connect (default 3 s).
	DialTimeout time.Duration
}

// Clients is a set of connections waiting for answers.
type Clients struct{ List []*Client }

// Queue connects n clients to addr one after another; each sends its payload and
// then waits, unanswered, until Await. Failed dials are recorded, not fatal.
func Queue(tb testing.TB, addr string, n int, opts ClientOptions) *Clients {
	tb.Helper()
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 3 * time.Second
	}
	cs := &Clients{List: make([]*Client, n)}
	tb.Cleanup(cs.close)
	for i := range n {
		c := &Client{Sent: []byte(fmt.Sprintf("client %d\n", i))}
		if opts.Payload != nil {
			c.Sent = opts.Payload(i)
		}
		d := net.Dialer{Timeout: opts.DialTimeout}
		if opts.SourcePort != 0 {
			d.LocalAddr = &net.TCPAddr{Port: opts.SourcePort + i}
		}
		c.Conn, c.Err = d.Dial("tcp", addr)
		if c.Err == nil {
			_, c.Err = c.Conn.Write(c.Sent)
		}
		if c.Err != nil {
			c.Outcome = Classify(c.Err)
		}
		cs.List[i] = c
	}
	return cs
}

// Tally counts outcomes.
type Tally map[Outcome]int

func (t Tally) String() string {
	s := ""
	for o := Answered; o <= Other; o++ {
		s += fmt.Sprintf("%s=%d ", o, t[o])
	}
	return s
}

// Await waits up to timeout in total for every connected client's first bytes of
// answer, classifies each client and closes its connection.
func (cs *Clients) Await(timeout time.Duration) Tally {
	deadline := time.Now().Add(timeout)
	var wg sync.WaitGroup
	for _, c := range cs.List {
		if c.Conn == nil || c.Err != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Conn.SetReadDeadline(deadline)
			buf := make([]byte, 4096)
			n, err := c.Conn.Read(buf)
			c.Reply = buf[:n]
			if n > 0 {
				err = nil
			}
			c.Err, c.Outcome = err, Classify(err)
		}()
	}
	wg.Wait()
	cs.close()
	t := Tally{}
	for _, c := range cs.List {
		t[c.Outcome]++
	}
	return t
}

func (cs *Clients) close() {
	for _, c := range cs.List {
		if c != nil && c.Conn != nil {
			c.Conn.Close()
		}
	}
}
