package drain_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/zerodrop/zerodrop/drain"
	"github.com/zerodrop/zerodrop/internal/netnstest"
)

// h2Frame is one HTTP/2 frame header read by h2Client.
type h2Frame struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

const (
	h2Data, h2Headers, h2RSTStream, h2Settings, h2Ping, h2GoAway = 0, 1, 3, 4, 6, 7
	h2EndStream, h2Ack                                           = 1, 1
)

// h2cProtocols is HTTP/1.1 and HTTP/2 without TLS (h2c), as a server that
// enables h2c sets http.Server.Protocols.
func h2cProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// h2Client is a bare HTTP/2 client, written frame by frame so the test sees
// exactly what the server sends (net/http's client hides GOAWAY).
type h2Client struct {
	c       net.Conn
	mu      sync.Mutex // one frame written at a time
	started bool
	goAway  []byte // the last GOAWAY's payload
	noAck   bool   // read acks no PING (a client slow to read them)
}

// preface sends the client preface and SETTINGS, and reads until the
// server acknowledges them (so it has read the preface).
func (h *h2Client) preface() error {
	h.started = true
	if _, err := io.WriteString(h.c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		return err
	}
	if err := h.write(h2Settings, 0, 0, nil); err != nil {
		return err
	}
	for {
		f, err := h.read()
		if err != nil || (f.typ == h2Settings && f.flags&h2Ack != 0) {
			return err
		}
	}
}

func (h *h2Client) write(typ, flags byte, stream uint32, payload []byte) error {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream)
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := h.c.Write(append(b, payload...))
	return err
}

func (h *h2Client) read() (h2Frame, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(h.c, hdr[:]); err != nil {
		return h2Frame{}, err
	}
	f := h2Frame{typ: hdr[3], flags: hdr[4], stream: binary.BigEndian.Uint32(hdr[5:]) & (1<<31 - 1)}
	f.payload = make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
	_, err := io.ReadFull(h.c, f.payload)
	if f.typ == h2GoAway {
		h.goAway = f.payload
	}
	switch {
	case err != nil:
	case f.typ == h2Settings && f.flags&h2Ack == 0:
		err = h.write(h2Settings, h2Ack, 0, nil)
	case f.typ == h2Ping && f.flags&h2Ack == 0 && !h.noAck:
		err = h.write(h2Ping, h2Ack, 0, f.payload) // RFC 9113 section 6.7
	}
	return f, err
}

// get sends the preface (unless sent) and GET / on stream id, and reads
// until that stream ends.
func (h *h2Client) get(id uint32, https bool) error {
	if !h.started {
		if err := h.preface(); err != nil {
			return err
		}
	}
	if err := h.open(id, https); err != nil {
		return err
	}
	for {
		f, err := h.read()
		if err != nil {
			return err
		}
		if f.stream == id && (f.typ == h2Data || f.typ == h2Headers) && f.flags&h2EndStream != 0 {
			return nil
		}
	}
}

// open sends GET / on stream id (HEADERS with END_STREAM).
func (h *h2Client) open(id uint32, https bool) error {
	scheme := byte(0x86) // HPACK static table: :method GET, :scheme http, :path /
	if https {
		scheme = 0x87
	}
	block := append([]byte{0x82, scheme, 0x84, 0x41, 9}, "127.0.0.1"...)
	return h.write(h2Headers, 0x4|h2EndStream, id, block)
}

// TestHTTP2IdleGoesAway: an HTTP/2 connection (ALPN h2 over TLS, and h2c),
// idle for longer than IdleGrace when the drain begins, is told to go away with a GOAWAY (no error,
// last stream id covering its request) before its close; it is never closed
// bare as an idle HTTP/1 connection is, which would cut a stream the client
// opened meanwhile. Its client acks the first step and then keeps the
// connection open (as Go's does when a request it queued fails at the
// GOAWAY): the drain closes it once net/http's GOAWAY has named the last
// stream and the client's TCP has acknowledged it, and the report counts it
// in GoAwayClosed. Before, net/http's HTTP/2 server waited 1 s (its
// goAwayTimeout) for the client to close first.
func TestHTTP2IdleGoesAway(t *testing.T) {
	for _, https := range []bool{true, false} {
		t.Run(map[bool]string{true: "h2", false: "h2c"}[https], func(t *testing.T) {
			netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
				netnstest.CheckLeaks(t)
				http2IdleGoesAway(t, https)
			})
		})
	}
}

func http2IdleGoesAway(t *testing.T, https bool) {
	cert := netnstest.NewCert(t)
	tl := listenTCP(t, "127.0.0.1:0")
	hs := &http.Server{Handler: named("A"), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}}
	if !https {
		hs.Protocols = h2cProtocols()
	}
	ds := &drain.Server{HTTP: hs, IdleGrace: 50 * time.Millisecond}
	wait := serve(t, func() error {
		if https {
			return ds.ServeTLS(tl, "", "")
		}
		return ds.Serve(tl)
	})
	c := dial(t, tl.Addr().String())
	if https {
		tc := tls.Client(c, cert.Client("h2"))
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
			t.Fatalf("ALPN chose %q", p)
		}
		c = tc
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	h := &h2Client{c: c}
	if err := h.get(1, https); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // idle for longer than IdleGrace: an HTTP/1 connection would be closed at once
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan *drain.Report, 1)
	go func() {
		rep, err := ds.Shutdown(ctx)
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
		done <- rep
	}()
	var goAway []byte
	var named time.Time // when the GOAWAY naming the last stream came
	for {
		f, err := h.read()
		if err != nil {
			t.Logf("read after %d bytes of GOAWAY: %v", len(goAway), err)
			break
		}
		if f.typ == h2GoAway {
			goAway = f.payload
			if len(goAway) >= 4 && binary.BigEndian.Uint32(goAway)&(1<<31-1) != 1<<31-1 {
				named = time.Now()
			}
		}
	}
	closedAfter := time.Since(named)
	c.Close()
	rep := <-done
	wait()
	if len(goAway) < 8 {
		t.Fatalf("the connection closed without a GOAWAY (report: %d HTTP/2 connections, forced %v)", rep.HTTP.HTTP2, rep.HTTP.Forced)
	}
	last, code := binary.BigEndian.Uint32(goAway)&(1<<31-1), binary.BigEndian.Uint32(goAway[4:])
	if last != 1 || code != 0 {
		t.Errorf("GOAWAY last stream %d code %d, want 1 and 0 (NO_ERROR)", last, code)
	}
	if h := rep.HTTP; h.HTTP2 != 1 || h.GoAwayAcked != 1 || h.GoAwayClosed != 1 || len(h.Forced) != 0 {
		t.Errorf("report: %d HTTP/2 connections, %d acked, %d closed after the last GOAWAY, forced %v; want 1, 1, 1 and none", h.HTTP2, h.GoAwayAcked, h.GoAwayClosed, h.Forced)
	}
	if named.IsZero() || closedAfter >= 500*time.Millisecond {
		t.Errorf("closed %v after the GOAWAY that named the last stream (or none came): want at once, not after net/http's 1 s", closedAfter)
	}
}

// TestHTTP2FirstRequestLate: an HTTP/2 connection past its handshake and
// preface before the stop sends its first request 20 ms after the listener
// stopped. It is answered, and the GOAWAY it then gets names that stream as
// the last one. Before, the drain did not wait for it (an HTTP/2 connection
// past its preface is StateIdle, not StateNew), so http.Server.Shutdown's
// GOAWAY said last stream 0 and the request was refused; curl --http2 saw
// that across a handoff ("received GOAWAY, error=0, last_stream=0").
func TestHTTP2FirstRequestLate(t *testing.T) {
	netnstest.Run(t, netnstest.Options{MigrateReq: netnstest.Keep}, func(t *testing.T) {
		netnstest.CheckLeaks(t)
		cert := netnstest.NewCert(t)
		tl := listenTCP(t, "127.0.0.1:0")
		addr := tl.Addr().String()
		ds := &drain.Server{HTTP: &http.Server{Handler: named("A"), TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}}}
		wait := serve(t, func() error { return ds.ServeTLS(tl, "", "") })
		tc := tls.Client(dial(t, addr), cert.Client("h2"))
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(20 * time.Second))
		h := &h2Client{c: tc}
		if err := h.preface(); err != nil {
			t.Fatal(err)
		}
		done := shutdownAsync(t, ds)
		waitRefused(t, addr)
		time.Sleep(20 * time.Millisecond) // the client is late, on purpose
		err := h.get(1, true)
		for err == nil { // read on to the GOAWAY and the close
			_, err = h.read()
		}
		tc.Close()
		rep := <-done
		wait()
		var last uint32
		if len(h.goAway) >= 8 {
			last = binary.BigEndian.Uint32(h.goAway) & (1<<31 - 1)
		}
		if rep.HTTP.Completed != 1 || last != 1 {
			t.Errorf("late first stream: %d completed, GOAWAY last stream %d (%d bytes), read %v; want 1 and 1",
				rep.HTTP.Completed, last, len(h.goAway), err)
		}
	})
}
