package tlstest

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// Recorder is what a Server's sockets are wrapped in (a
// *tlsresume.Recorder): a net.Conn told the HTTP state of its connection.
type Recorder interface {
	net.Conn
	ConnState(http.ConnState)
}

// NewListener is tls.NewListener with each accepted socket passed through
// wrap first: crypto/tls runs over what wrap returns.
func NewListener[R net.Conn](l net.Listener, cfg *tls.Config, wrap func(net.Conn) R) net.Listener {
	return &wrapListener[R]{Listener: l, cfg: cfg, wrap: wrap}
}

type wrapListener[R net.Conn] struct {
	net.Listener
	cfg  *tls.Config
	wrap func(net.Conn) R
}

func (l *wrapListener[R]) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(l.wrap(c), l.cfg), nil
}

// Handler answers every request with the line "name path".
func Handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s\n", name, r.URL.Path)
	})
}

// Server is an HTTPS server on 127.0.0.1 whose connections run over
// Recorders (so they can be proven and taken); Handshakes counts the
// handshakes it did.
type Server[R Recorder] struct {
	Addr       string
	Cert       *netnstest.Cert
	Handshakes atomic.Int32
	mu         sync.Mutex
	recs       []R
}

// StartServer starts a Server answering Handler(name) in TLS 1.2 or 1.3,
// HTTP/1.1. config turns its tls.Config into the one served (a
// tlsresume.Capture's Config), and wrap makes each accepted socket the
// Recorder crypto/tls runs over (the Capture's Wrap). The server is closed
// when the test ends.
func StartServer[R Recorder](t testing.TB, name string, config func(*tls.Config) *tls.Config, wrap func(net.Conn) R) *Server[R] {
	t.Helper()
	s := &Server[R]{Cert: netnstest.NewCert(t)}
	cfg := config(&tls.Config{
		Certificates: []tls.Certificate{s.Cert.TLS},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		VerifyConnection: func(tls.ConnectionState) error {
			s.Handshakes.Add(1)
			return nil
		},
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	srv := &http.Server{
		Handler: Handler(name),
		ConnState: func(c net.Conn, st http.ConnState) {
			r := c.(*tls.Conn).NetConn().(R)
			if st == http.StateNew {
				s.mu.Lock()
				s.recs = append(s.recs, r)
				s.mu.Unlock()
			}
			r.ConnState(st)
		},
	}
	go srv.Serve(NewListener(l, cfg, wrap))
	t.Cleanup(func() { srv.Close() })
	return s
}

// Rec returns the Recorder of the i-th connection the server accepted
// (counting from 0), failing the test if it has not accepted that many.
func (s *Server[R]) Rec(t testing.TB, i int) R {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if i >= len(s.recs) {
		t.Fatalf("connection %d asked for, %d accepted", i, len(s.recs))
	}
	return s.recs[i]
}

// Successor serves the connections sent on the channel it returns (the
// Conns continued from the States taken), as a second server would: as
// plain HTTP/1.1, answering Handler("successor"). It is closed when the
// test ends.
func Successor(t testing.TB) chan<- net.Conn {
	l := &chanListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: Handler("successor")}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.conns
}

// chanListener yields the connections sent on conns.
type chanListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *chanListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *chanListener) Addr() net.Addr { return &net.TCPAddr{} }
